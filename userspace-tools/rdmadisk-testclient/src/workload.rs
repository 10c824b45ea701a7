//! Random verified I/O: mixed reads and writes of 4 KiB..1 MiB, flushes, discards and
//! write-zeroes, with a shadow copy of the device to check every read.

use std::io;
use std::time::Instant;

use rdmadisk_proto::crc32c::crc32c;
use rdmadisk_proto::wire::{req_flags, Opcode, RemoteBuf, Request, Status, SECTOR_SIZE};

use crate::transport::Transport;

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    pub count: u64,
    pub queue_depth: usize,
    pub read_pct: u32,
    pub min_size: u32,
    pub max_size: u32,
    pub span_bytes: u64,
    pub flush_every: u64,
    pub discard_every: u64,
    pub zeroes_every: u64,
    pub fua_every: u64,
    pub seed: u64,
    /// A `Fenced` answer is the target's word that it applied nothing (another writer, or a
    /// lock it must take back first): counted in `fenced`, not as a failure. A kernel client
    /// reissues such a request after it reconnects; this one does not.
    pub fenced_ok: bool,
    pub verbose: bool,
}

/// Counters of a run.
#[derive(Default, Debug)]
pub struct Report {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub write_zeroes: u64,
    pub nops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub reads_verified: u64,
    pub sectors_compared: u64,
    pub data_mismatches: u64,
    pub read_crc_mismatches: u64,
    pub status_errors: u64,
    /// `Fenced` answers taken as not applied (`Params::fenced_ok`).
    pub fenced: u64,
    /// The export's capacity (sectors) the responses reported: the first and the last
    /// (features::RESIZE; 0 without).
    pub capacity_first: u64,
    pub capacity_last: u64,
    pub passed: u64,
    pub failed: u64,
    pub seconds: f64,
}

/// A small deterministic PRNG (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let v = self.next().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&v[..n]);
    }
}

struct Op {
    opcode: Opcode,
    sector: u64,
    len: u32,
    /// Write data (kept to update the shadow when the write completes).
    data: Vec<u8>,
}

const SECTOR: u64 = SECTOR_SIZE as u64;
const ALIGN: u64 = 4096;

/// The shadow device: contents and which sectors are known.
struct Shadow {
    bytes: Vec<u8>,
    known: Vec<bool>,
}

impl Shadow {
    fn set(&mut self, sector: u64, data: &[u8]) {
        let off = (sector * SECTOR) as usize;
        self.bytes[off..off + data.len()].copy_from_slice(data);
        let s = sector as usize;
        self.known[s..s + data.len() / SECTOR as usize].fill(true);
    }

    fn zero(&mut self, sector: u64, len: u32) {
        let off = (sector * SECTOR) as usize;
        self.bytes[off..off + len as usize].fill(0);
        let s = sector as usize;
        self.known[s..s + (len as u64 / SECTOR) as usize].fill(true);
    }

    /// Returns (sectors compared, sectors differing).
    fn check(&self, sector: u64, data: &[u8]) -> (u64, u64) {
        let mut cmp = 0;
        let mut bad = 0;
        for (i, chunk) in data.chunks(SECTOR as usize).enumerate() {
            let s = sector as usize + i;
            if self.known[s] {
                cmp += 1;
                let off = s * SECTOR as usize;
                if self.bytes[off..off + chunk.len()] != *chunk {
                    bad += 1;
                }
            }
        }
        (cmp, bad)
    }
}

fn pick_size(rng: &mut Rng, p: &Params) -> u32 {
    let lo = (p.min_size as u64 / ALIGN).max(1);
    let hi = (p.max_size as u64 / ALIGN).max(lo);
    // Log-uniform between lo and hi 4 KiB units: sizes of every magnitude are common.
    let lo_bits = 63 - lo.leading_zeros() as u64;
    let hi_bits = 63 - hi.leading_zeros() as u64;
    let b = lo_bits + rng.below(hi_bits - lo_bits + 1);
    let units = ((1u64 << b) + rng.below(1u64 << b)).clamp(lo, hi);
    (units * ALIGN) as u32
}

/// Runs the workload over `t`.
pub fn run<T: Transport>(t: &mut T, p: &Params) -> io::Result<Report> {
    let cap_bytes = t.reply().capacity_sectors * SECTOR;
    let span = p.span_bytes.min(cap_bytes) / ALIGN * ALIGN;
    let max_io = (t.reply().max_io_bytes as u64)
        .min(p.max_size as u64)
        .min(span) as u32;
    if span < ALIGN {
        return Err(io::Error::other("export too small"));
    }
    let p = Params {
        max_size: max_io,
        min_size: p.min_size.min(max_io),
        ..p.clone()
    };
    let read_only = t.reply().features & rdmadisk_proto::wire::features::READ_ONLY != 0;
    let qd = p.queue_depth.min(t.slots()).max(1);
    let mut rng = Rng::new(p.seed);
    let mut shadow = Shadow {
        bytes: vec![0; span as usize],
        known: vec![false; (span / SECTOR) as usize],
    };
    let mut written: Vec<(u64, u32)> = Vec::new();
    let mut ops: Vec<Option<Op>> = (0..t.slots()).map(|_| None).collect();
    let mut free: Vec<usize> = (0..qd).rev().collect();
    let mut r = Report::default();
    let start = Instant::now();
    let mut issued = 0u64;
    let mut tag = 0u32;

    let overlaps = |ops: &Vec<Option<Op>>, s: u64, len: u32| {
        let e = s + len as u64 / SECTOR;
        ops.iter().flatten().any(|o| {
            let oe = o.sector + o.len as u64 / SECTOR;
            s < oe && o.sector < e
        })
    };

    while issued < p.count || free.len() < qd {
        // Issue while there are free slots and work left.
        let mut blocked = false;
        while issued < p.count && !free.is_empty() && !blocked {
            let i = issued + 1;
            let every = |n: u64| n > 0 && i % n == 0;
            let opcode = if every(p.flush_every) {
                Opcode::Flush
            } else if every(p.discard_every) && !read_only {
                Opcode::Discard
            } else if every(p.zeroes_every) && !read_only {
                Opcode::WriteZeroes
            } else if read_only || rng.below(100) < p.read_pct as u64 {
                Opcode::Read
            } else {
                Opcode::Write
            };
            let (sector, len) = if opcode == Opcode::Flush {
                (0, 0)
            } else {
                let mut pick = None;
                for _ in 0..32 {
                    let (s, l) =
                        if opcode == Opcode::Read && !written.is_empty() && rng.below(100) < 75 {
                            // Read back (part of) something written.
                            let (ws, wl) = written[rng.below(written.len() as u64) as usize];
                            let units = wl as u64 / ALIGN;
                            let first = rng.below(units);
                            let n = 1 + rng.below(units - first);
                            (ws + first * ALIGN / SECTOR, (n * ALIGN) as u32)
                        } else {
                            let l = pick_size(&mut rng, &p);
                            let slots = (span - l as u64) / ALIGN + 1;
                            (rng.below(slots) * ALIGN / SECTOR, l)
                        };
                    if !overlaps(&ops, s, l) {
                        pick = Some((s, l));
                        break;
                    }
                }
                match pick {
                    Some(x) => x,
                    None => {
                        blocked = true;
                        continue;
                    }
                }
            };
            let Some(&slot) = free.last() else { break };
            let mut data = Vec::new();
            if opcode == Opcode::Write {
                data = vec![0u8; len as usize];
                rng.fill(&mut data);
                t.buf(slot)[..len as usize].copy_from_slice(&data);
            }
            let flags = if opcode == Opcode::Write && every(p.fua_every) {
                req_flags::FUA
            } else {
                0
            };
            tag = tag.wrapping_add(1);
            let req = Request {
                opcode,
                flags,
                credits: 0,
                tag,
                sector,
                length: len,
                data_crc: if opcode == Opcode::Write {
                    crc32c(&data)
                } else {
                    0
                },
                buf: RemoteBuf {
                    addr: 0,
                    rkey: 0,
                    len: if opcode.has_data() { len } else { 0 },
                },
            };
            if !t.submit(slot, req)? {
                blocked = true; // out of credits: wait for a completion
                continue;
            }
            free.pop();
            ops[slot] = Some(Op {
                opcode,
                sector,
                len,
                data,
            });
            issued += 1;
            if p.verbose {
                eprintln!("submit tag {tag} slot {slot} {opcode:?} sector {sector} len {len}");
            }
        }
        if free.len() == qd {
            if issued >= p.count {
                break;
            }
            if blocked {
                return Err(io::Error::other(
                    "cannot issue: no credit and nothing in flight",
                ));
            }
            continue;
        }
        // Complete one.
        let d = t.complete()?;
        let Some(op) = ops[d.slot].take() else {
            return Err(io::Error::other(format!(
                "completion for idle slot {}",
                d.slot
            )));
        };
        free.push(d.slot);
        if r.capacity_first == 0 {
            r.capacity_first = d.resp.capacity_sectors;
        }
        r.capacity_last = d.resp.capacity_sectors;
        let mut ok = d.resp.status == Status::Ok;
        // Not applied: the shadow keeps what was there, and the op neither passes nor fails.
        if p.fenced_ok && d.resp.status == Status::Fenced {
            r.fenced += 1;
            continue;
        }
        if !ok {
            r.status_errors += 1;
            eprintln!(
                "rdmadisk-testclient: {:?} sector {} len {}: status {}",
                op.opcode, op.sector, op.len, d.resp.status
            );
        }
        match op.opcode {
            Opcode::Read => {
                r.reads += 1;
                if ok {
                    r.bytes_read += op.len as u64;
                    let data = &t.buf(d.slot)[..op.len as usize];
                    if crc32c(data) != d.resp.data_crc {
                        r.read_crc_mismatches += 1;
                        ok = false;
                        eprintln!(
                            "rdmadisk-testclient: read sector {} len {}: CRC mismatch",
                            op.sector, op.len
                        );
                    }
                    let (cmp, bad) = shadow.check(op.sector, data);
                    r.sectors_compared += cmp;
                    if cmp > 0 {
                        r.reads_verified += 1;
                    }
                    if bad > 0 {
                        r.data_mismatches += 1;
                        ok = false;
                        eprintln!(
                            "rdmadisk-testclient: read sector {} len {}: {bad} sector(s) differ from what was written",
                            op.sector, op.len
                        );
                    }
                }
            }
            Opcode::Write => {
                r.writes += 1;
                if ok {
                    r.bytes_written += op.len as u64;
                    shadow.set(op.sector, &op.data);
                    written.push((op.sector, op.len));
                }
            }
            Opcode::Discard | Opcode::WriteZeroes => {
                if op.opcode == Opcode::Discard {
                    r.discards += 1;
                } else {
                    r.write_zeroes += 1;
                }
                if ok {
                    shadow.zero(op.sector, op.len);
                }
            }
            Opcode::Flush => r.flushes += 1,
            // The workload never closes its session; a Close would only count as a NOP.
            Opcode::Nop | Opcode::Close => r.nops += 1,
        }
        if ok {
            r.passed += 1;
        } else {
            r.failed += 1;
        }
    }
    r.seconds = start.elapsed().as_secs_f64();
    Ok(r)
}

/// Requests that must fail with a given status while the connection stays usable.
pub fn negative<T: Transport>(t: &mut T, r: &mut Report, tag_base: u32) -> io::Result<()> {
    let cap = t.reply().capacity_sectors;
    let max_io = t.reply().max_io_bytes;
    let cases: Vec<(Opcode, u64, u32, Status, &str)> = vec![
        (
            Opcode::Read,
            cap,
            4096,
            Status::OutOfRange,
            "read past the end",
        ),
        (
            Opcode::Read,
            cap.saturating_sub(4),
            4096,
            Status::OutOfRange,
            "read straddling the end",
        ),
        (
            Opcode::Read,
            0,
            1000,
            Status::Invalid,
            "read of a length not a multiple of 512",
        ),
        (
            Opcode::Read,
            0,
            max_io.saturating_add(4096),
            Status::Invalid,
            "read longer than max_io_bytes",
        ),
        (Opcode::Nop, 0, 0, Status::Ok, "nop after the errors"),
    ];
    for (i, (opcode, sector, length, want, what)) in cases.into_iter().enumerate() {
        // The slot buffer may be smaller than an oversized request: the target must refuse it
        // before touching the buffer.
        let req = Request {
            opcode,
            flags: 0,
            credits: 0,
            tag: tag_base + i as u32,
            sector,
            length,
            data_crc: 0,
            buf: RemoteBuf {
                addr: 0,
                rkey: 0,
                len: if opcode.has_data() {
                    length.min(4096)
                } else {
                    0
                },
            },
        };
        if !t.submit(0, req)? {
            return Err(io::Error::other("no credit for a negative test"));
        }
        let d = t.complete()?;
        let ok = d.resp.status == want;
        println!(
            "{} - negative: {what}: status {} (want {want})",
            if ok { "ok" } else { "not ok" },
            d.resp.status
        );
        if ok {
            r.passed += 1;
        } else {
            r.failed += 1;
        }
    }
    Ok(())
}
