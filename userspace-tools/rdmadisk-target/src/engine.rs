//! Transport-independent request handling: admission, fencing, the I/O itself, CRC checks,
//! fault injection, and the HelloReply for an export.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rdmadisk_net::allow::AllowList;
use rdmadisk_proto::crc32c::crc32c;
use rdmadisk_proto::wire::{
    features, req_flags, Hello, HelloReply, HelloStatus, Opcode, Request, Response, Status,
    SECTOR_SHIFT, SECTOR_SIZE,
};

use crate::export::Export;
use crate::fence_table::{ConnFence, FenceTable, Refusal, FENCE_TABLE_CAP};
use crate::hostile::{Hostile, Kind};
use crate::stats::Stats;

/// Settings that shape every connection.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_io_bytes: u32,
    pub queue_depth: u16,
    /// Receives posted per connection = request credits granted at attach.
    pub credits: u16,
    /// Corrupt one byte of read data after computing its CRC on 1 in N reads (0 = never).
    pub corrupt_read_every: u64,
    /// Treat 1 in N write CRCs as mismatched (0 = never).
    pub fail_write_crc_every: u64,
    /// Never Send-with-Invalidate (diagnostic).
    pub no_invalidate: bool,
    /// Test-only hostile responses (off when `kinds` is empty).
    pub hostile: Hostile,
    /// Test only: while this file exists, RDMA connections of client sessions are refused.
    pub refuse_rdma_file: Option<std::path::PathBuf>,
    /// Test only: reads and writes covering this sector are never answered.
    pub stall_sector: Option<u64>,
    /// Test only: responses grant no credits back.
    pub grant_no_credits: bool,
}

/// What a connection gets from a successful attach.
pub struct Attached {
    pub export: Arc<Export>,
    pub fence: ConnFence,
}

/// State shared by every connection thread.
pub struct Target {
    pub exports: HashMap<String, Arc<Export>>,
    pub allow: AllowList,
    pub limits: Limits,
    pub stats: Stats,
    pub shutdown: AtomicBool,
    fences: FenceTable,
    /// Which hostile kind acts next, across connections (see `hostile::Chooser`).
    pub hostile_turn: std::sync::atomic::AtomicUsize,
    read_seq: AtomicU64,
    write_seq: AtomicU64,
}

impl Target {
    pub fn new(exports: Vec<Export>, allow: AllowList, limits: Limits) -> Target {
        Target {
            exports: exports
                .into_iter()
                .map(|e| (e.name.clone(), Arc::new(e)))
                .collect(),
            allow,
            limits,
            stats: Stats::default(),
            shutdown: AtomicBool::new(false),
            fences: FenceTable::new(FENCE_TABLE_CAP),
            hostile_turn: std::sync::atomic::AtomicUsize::new(0),
            read_seq: AtomicU64::new(0),
            write_seq: AtomicU64::new(0),
        }
    }

    /// Whether SIGTERM asked us to stop.
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// Decides on a Hello from `peer`: the export to serve and the connection's fence, or the
    /// refusal status. Refusals for fencing reasons are logged here, the others by the caller.
    pub fn attach(&self, peer: Option<SocketAddr>, hello: &Hello) -> Result<Attached, HelloStatus> {
        match peer.map(|p| p.ip()) {
            Some(ip) if self.allow.allows(ip) => {}
            None if self.allow.is_empty() => {}
            _ => return Err(HelloStatus::NotAllowed),
        }
        if self.stopping() {
            return Err(HelloStatus::Busy);
        }
        if hello.queue_count == 0 || hello.queue_id >= hello.queue_count {
            return Err(HelloStatus::Invalid);
        }
        let export = self
            .exports
            .get(hello.export.as_str())
            .cloned()
            .ok_or(HelloStatus::NoSuchExport)?;
        // Peers whose address rdma_cm could not tell share one fence: they may then fence each
        // other (failed writes, reported), where not fencing them could let an old write land
        // over a newer one (silent corruption).
        let ip = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.ip());
        let who = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
        let (session, epoch) = (hello.session_id, hello.epoch);
        match self.fences.attach(ip, &export.name, session, epoch) {
            Ok(fence) => Ok(Attached { export, fence }),
            Err(Refusal::Full) => {
                Stats::inc(&self.stats.fence_table_full);
                eprintln!(
                    "rdmadisk-target: refusing {who} for export {} (session {session}): the fence table is full ({FENCE_TABLE_CAP} address/export pairs); answering Busy",
                    export.name
                );
                Err(HelloStatus::Busy)
            }
            Err(Refusal::Stale { current }) => {
                Stats::inc(&self.stats.stale_hellos);
                let (cs, ce) = current.unwrap_or((0, 0));
                eprintln!(
                    "rdmadisk-target: stale hello from {who} for export {}: session {session} epoch {epoch}, but the fence is at session {cs} epoch {ce}; refused Stale",
                    export.name
                );
                Err(HelloStatus::Stale)
            }
        }
    }

    /// Runs `apply`, the execution of `req` (or its error status), under the connection's
    /// fence. `Err(Status::Fenced)`: a modifying request of a superseded connection, not run.
    pub fn fenced<R>(
        &self,
        c: &ConnFence,
        req: &Request,
        apply: impl FnOnce() -> R,
    ) -> Result<R, Status> {
        let out = c.run(req.opcode.modifies(), apply);
        if out.moved {
            Stats::inc(&self.stats.fence_moves);
            eprintln!(
                "rdmadisk-target: fence for {} {} moved to session {} epoch {}",
                c.ip, c.export, c.session, c.epoch
            );
        }
        out.applied.ok_or_else(|| {
            Stats::inc(&self.stats.fenced_requests);
            if c.first_fenced() {
                let (fs, fe) = c.current().unwrap_or((0, 0));
                eprintln!(
                    "rdmadisk-target: {} {}: session {} epoch {} is superseded (fence at session {fs} epoch {fe}); its writes are answered Fenced",
                    c.ip, c.export, c.session, c.epoch
                );
            }
            Status::Fenced
        })
    }

    /// Test only (`--stall-sector`): whether `req` is a read or write this target never
    /// answers. Counted.
    pub fn stalls(&self, req: &Request) -> bool {
        let Some(s) = self.limits.stall_sector else {
            return false;
        };
        let len = u64::from(req.length) >> SECTOR_SHIFT;
        let hit = matches!(req.opcode, Opcode::Read | Opcode::Write)
            && req.sector <= s
            && s < req.sector.saturating_add(len.max(1));
        if hit {
            Stats::inc(&self.stats.stalled_requests);
        }
        hit
    }

    /// Counts one hostile act.
    pub fn count_hostile(&self, k: Kind) {
        Stats::inc(&self.stats.hostile_acts);
        Stats::inc(self.stats.hostile(k));
    }

    /// The HelloReply for an attached export.
    pub fn hello_reply(&self, e: &Export) -> HelloReply {
        let mut f = features::FLUSH | features::FUA | features::DISCARD | features::WRITE_ZEROES;
        if e.read_only {
            f |= features::READ_ONLY;
        }
        HelloReply {
            status: HelloStatus::Ok,
            capacity_sectors: e.capacity_sectors,
            logical_block_size: e.logical_block_size,
            physical_block_size: e.physical_block_size,
            max_io_bytes: self.limits.max_io_bytes,
            max_segments: 256,
            queue_depth: self.limits.queue_depth,
            initial_credits: self.limits.credits,
            features: f,
            max_discard_sectors: self.limits.max_io_bytes / SECTOR_SIZE,
        }
    }

    /// Counts a request and runs Request::validate. On failure the error status is the response.
    pub fn admit(&self, e: &Export, req: &Request) -> Result<(), Status> {
        let s = &self.stats;
        Stats::inc(&s.requests);
        Stats::inc(match req.opcode {
            Opcode::Read => &s.reads,
            Opcode::Write => &s.writes,
            Opcode::Flush => &s.flushes,
            Opcode::Discard => &s.discards,
            Opcode::WriteZeroes => &s.write_zeroes,
            Opcode::Nop => &s.nops,
        });
        req.validate(e.capacity_sectors, self.limits.max_io_bytes, e.read_only)
            .inspect_err(|_| {
                Stats::inc(&s.bound_violations);
            })
    }

    fn io_status(&self, r: std::io::Result<()>, e: &Export) -> Status {
        match r {
            Ok(()) => Status::Ok,
            Err(err) => {
                Stats::inc(&self.stats.io_errors);
                eprintln!("rdmadisk-target: export {}: i/o error: {err}", e.name);
                Status::IoError
            }
        }
    }

    /// Reads an admitted Read into `buf` (exactly `req.length` bytes). Returns the status and
    /// the CRC32C of the data *as read*; fault injection may corrupt `buf` afterwards.
    pub fn read(&self, e: &Export, req: &Request, buf: &mut [u8]) -> (Status, u32) {
        let off = req.sector << SECTOR_SHIFT;
        let st = self.io_status(e.read_at(buf, off), e);
        if st != Status::Ok {
            return (st, 0);
        }
        Stats::add(&self.stats.bytes_read, buf.len() as u64);
        let crc = crc32c(buf);
        let every = self.limits.corrupt_read_every;
        if every > 0 && (self.read_seq.fetch_add(1, Ordering::Relaxed) + 1) % every == 0 {
            if let Some(b) = buf.first_mut() {
                *b ^= 0xff;
            }
            Stats::inc(&self.stats.injected_read_corruptions);
        }
        (st, crc)
    }

    /// Checks the CRC of an admitted Write's data and writes it. Nothing is written on a
    /// mismatch.
    pub fn write(&self, e: &Export, req: &Request, data: &[u8]) -> Status {
        let every = self.limits.fail_write_crc_every;
        let injected =
            every > 0 && (self.write_seq.fetch_add(1, Ordering::Relaxed) + 1) % every == 0;
        if injected {
            Stats::inc(&self.stats.injected_write_crc_failures);
        }
        if injected || crc32c(data) != req.data_crc {
            Stats::inc(&self.stats.crc_failures);
            return Status::CrcMismatch;
        }
        let off = req.sector << SECTOR_SHIFT;
        let st = self.io_status(e.write_at(data, off, req.flags & req_flags::FUA != 0), e);
        if st == Status::Ok {
            Stats::add(&self.stats.bytes_written, data.len() as u64);
        }
        st
    }

    /// Runs an admitted request that carries no data.
    pub fn no_data(&self, e: &Export, req: &Request) -> Status {
        let off = req.sector << SECTOR_SHIFT;
        let len = u64::from(req.length);
        match req.opcode {
            Opcode::Flush => self.io_status(e.flush(), e),
            Opcode::Discard => self.io_status(e.discard(off, len), e),
            Opcode::WriteZeroes => self.io_status(e.write_zeroes(off, len), e),
            Opcode::Nop => Status::Ok,
            Opcode::Read | Opcode::Write => Status::Invalid,
        }
    }

    /// The response to `req`, the same on every transport: it echoes the tag and the rkey,
    /// reports the length only on success, and grants back the credit the request used.
    pub fn response(&self, req: &Request, status: Status, data_crc: u32) -> Response {
        Response {
            tag: req.tag,
            status,
            credits: u16::from(!self.limits.grant_no_credits),
            data_crc,
            length: if status == Status::Ok { req.length } else { 0 },
            rkey: req.buf.rkey,
        }
    }

    /// fsyncs every writable export (at shutdown).
    pub fn sync_all(&self) {
        for e in self.exports.values().filter(|e| !e.read_only) {
            if let Err(err) = e.flush() {
                eprintln!(
                    "rdmadisk-target: export {}: fsync at shutdown failed: {err}",
                    e.name
                );
            }
        }
    }
}

/// Active-connection accounting: decrements `connections_active` when dropped.
pub struct ConnGuard<'a>(&'a Target);

impl<'a> ConnGuard<'a> {
    pub fn new(t: &'a Target) -> Self {
        Stats::inc(&t.stats.connections_active);
        ConnGuard(t)
    }
}

impl Drop for ConnGuard<'_> {
    fn drop(&mut self) {
        self.0
            .stats
            .connections_active
            .fetch_sub(1, Ordering::Relaxed);
    }
}
