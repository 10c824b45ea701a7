//! The requests of one connection, whatever its transport: many in flight at once, each in a
//! slot of its own, moved along by completions (docs/design.md, "The target").
//!
//! A slot is a request credit: a connection has exactly `credits` of them, so it can never
//! hold more requests than it granted credits for. A request goes
//!
//! ```text
//!   Free -> (admission) -> [WaitBuf ->] [Fetch (write data) ->] Io (backing) -> Answer -> Free
//! ```
//!
//! and the transport takes it from there: it brings a write's data into the slot's buffer
//! (`Fetch`), and sends the response (`Answer`), after which it calls [`Core::release`].
//! Backing I/O goes through the connection's [`Ring`]; a request holds its fence [`Ticket`]
//! from the check to the completion of its I/O, so that a newer connection set's first
//! request waits for it (fencing rule).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmadisk_proto::crc32c::crc32c;
use rdmadisk_proto::wire::{Opcode, Request, Status, SECTOR_SHIFT};

use crate::backing::IoOp;
use crate::engine::Target;
use crate::export::{Export, Hold, SyncToken};
use crate::wake::Wake;

/// Why a trusted connection is reset when an exclusive export was taken meanwhile (between
/// its Hello and its proof or first request).
pub const TAKEN: &str = "the export was attached read-write by another host meanwhile";
use crate::fence_table::{ConnFence, Ticket};
use crate::pool::{Buf, Demand, Pool, Take};
use crate::registry::{Attach, Counters, Registered};
use crate::ring::{Done, Ring};
use crate::stats::{micros, Stats};

/// Kinds of ring operations, in the top byte of `user_data`; the rest is an index.
/// How often a connection, and the listeners, look at their deadlines and the shutdown flag
/// when nothing else wakes them. Every idle wakeup costs CPU the data path needs: under the
/// test bed's emulation, a 100 ms tick over a handful of threads (with a 20 ms accept poll
/// and a 50 ms signal poll) took about 7% of the storage VM's one vCPU.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(250);

pub const UD_IO: u64 = 1 << 56;
pub const UD_CQ: u64 = 2 << 56;
/// The RDMA send CQ's channel (UD_CQ is the receive CQ's).
pub const UD_SCQ: u64 = 5 << 56;
/// The target's stop eventfd (`Target::stop_fd`).
pub const UD_STOP: u64 = 6 << 56;
/// A connection's own wake-up eventfd (RDMA: its peer disconnected).
pub const UD_WAKE: u64 = 7 << 56;
/// The eventfd other threads signal when something this connection waits for may have come
/// (`Core::kick`).
pub const UD_KICK: u64 = 8 << 56;
pub const UD_RECV: u64 = 3 << 56;
pub const UD_SEND: u64 = 4 << 56;
pub const UD_KIND: u64 = 0xff << 56;

/// Where a slot's request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Free,
    /// Waiting for a data buffer.
    WaitBuf,
    /// The transport is bringing the write data in.
    Fetch,
    /// Backing I/O in flight.
    Io,
    /// A Flush or FUA write succeeded; its answer waits until the flushes and FUA writes of
    /// the export that may have taken an error it must report have recorded it
    /// (`export::Syncs`).
    Settle,
    /// Done; the transport sends the response, then releases the slot.
    Answer,
    /// Never to be answered (`--stall-sector`); the slot stays taken.
    Stalled,
}

pub struct Slot {
    pub req: Request,
    pub buf: Option<Buf>,
    pub stage: Stage,
    op: Option<IoOp>,
    /// The backing already fell back once for this request (a discard turned zeroing, say):
    /// no second fallback, so two unsupported operations cannot take turns for ever.
    fell_back: bool,
    ticket: Option<Ticket>,
    /// A Flush or FUA write's place among the export's (`export::SyncToken`), from before
    /// its operation is submitted to its completion.
    sync: Option<SyncToken>,
    /// In `Settle`: the export's [`Export::sync_mark`] it waits for.
    mark: u64,
    pub status: Status,
    /// CRC32C of a read's data.
    pub crc: u32,
    /// When the transport handed the request over, and when its backing operation started:
    /// the service-time counters (`Stats::service_us`, `Stats::backing_us`).
    arrived: Option<Instant>,
    io_at: Option<Instant>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            req: Request::bare(Opcode::Nop, 0),
            buf: None,
            stage: Stage::Free,
            op: None,
            fell_back: false,
            ticket: None,
            sync: None,
            mark: 0,
            status: Status::Ok,
            crc: 0,
            arrived: None,
            io_at: None,
        }
    }

    /// Bytes of data the response carries (a successful read's).
    pub fn out_len(&self) -> usize {
        if self.req.opcode == Opcode::Read && self.status == Status::Ok {
            self.req.length as usize
        } else {
            0
        }
    }
}

/// One connection's requests.
pub struct Core {
    pub t: Arc<Target>,
    pub export: Arc<Export>,
    pub fence: ConnFence,
    pub ring: Ring,
    pub pool: Arc<Pool>,
    pub slots: Vec<Slot>,
    /// Slots waiting for a buffer, oldest first.
    waiting: VecDeque<usize>,
    /// The oldest waiting slot's place in its pool's demand (see [`Pool::get`]).
    demand: Option<Demand>,
    /// Slots whose write data the transport must bring in.
    pub to_fetch: VecDeque<usize>,
    /// Slots whose response the transport must send.
    pub to_answer: VecDeque<usize>,
    /// Slots in `Settle`.
    settling: Vec<usize>,
    /// The waiting slots found no buffer last time (counted once per wait).
    starved: bool,
    /// The connection may modify the export (`Attached::writes`).
    pub writes: bool,
    /// The backing's connection to the store it was admitted under ([`Backing::instance`]).
    ///
    /// [`Backing::instance`]: crate::backing::Backing::instance
    pub instance: u64,
    /// Keeps an exclusive export held (until the last write of this connection is over,
    /// stuck ones included: see [`reap`]); taken once the client is trusted ([`Core::confirm`]).
    hold: Option<Hold>,
    /// The client is trusted: it proved its key, or (without a key) its first request came.
    confirmed: bool,
    /// A poll of the target's stop eventfd is on the ring.
    stop_polled: bool,
    /// Signalled by other threads when what a slot waits for may have come (a flush's
    /// result, a buffer): polled on the ring, so the wait ends at once, not at a tick.
    /// `None` if no eventfd could be made (then ticks it is).
    pub kick: Option<Arc<Wake>>,
    kick_polled: bool,
    /// When teardown stops waiting for the ring (set by the first [`Core::drain`]).
    drain_until: Option<Instant>,
    /// This connection's request counters (its export's count the same requests).
    pub counters: Arc<Counters>,
    /// Its entry in the target's registry, once the transport has made it
    /// ([`Core::register`]).
    registered: Option<Registered>,
}

/// How long teardown waits for a connection's ring operations before it lets go of the
/// connection and waits for them apart ([`serve`]).
const DRAIN: Duration = Duration::from_secs(5);

impl Core {
    pub fn new(
        t: Arc<Target>,
        export: Arc<Export>,
        fence: ConnFence,
        writes: bool,
        pool: Arc<Pool>,
        slots: usize,
    ) -> std::io::Result<Core> {
        // A request needs at most one backing operation at a time; TCP adds its socket's.
        let mut ring = Ring::new(slots as u32 + 8)?;
        Stats::set(&t.stats.ring_setup, ring.setup().gauge());
        // The export's file as the ring's fixed file: no fd lookup, no reference taken, per
        // operation. The connection holds the export, so the fd outlives the ring's use.
        if let Some(fd) = export.backing.fixed_fd() {
            if let Err(e) = ring.register_file(fd) {
                log::debug!(
                    "export {}: the ring takes its file by fd ({e})",
                    export.name
                );
            }
        }
        // The stop wakes the thread however long it sleeps (`Target::idle_wait`).
        let stop_polled = match t.stop_fd() {
            Some(fd) => ring.poll_in(fd, UD_STOP).is_ok(),
            None => false,
        };
        let kick = Wake::new().ok().map(Arc::new);
        let kick_polled = kick
            .as_ref()
            .is_some_and(|k| ring.poll_in(k.fd(), UD_KICK).is_ok());
        Ok(Core {
            stop_polled,
            kick,
            kick_polled,
            t,
            // A takeover on its Hello came first; with a key, the one after its proof sets
            // this again.
            instance: export.backing.instance(),
            export,
            fence,
            ring,
            pool,
            slots: (0..slots).map(|_| Slot::new()).collect(),
            waiting: VecDeque::new(),
            demand: None,
            to_fetch: VecDeque::new(),
            to_answer: VecDeque::new(),
            settling: Vec::new(),
            starved: false,
            writes,
            hold: None,
            confirmed: false,
            drain_until: None,
            counters: Arc::default(),
            registered: None,
        })
    }

    /// Lists the connection among the attached ones (`rdmadisk-target clients`), until it
    /// ends.
    pub fn register(&mut self, a: Attach) {
        let r = self.t.registry.add(
            a,
            self.counters.clone(),
            &self.export.client_totals,
            self.kick.clone(),
        );
        // The lists were checked at attach, before this entry existed: a reload that changed
        // them in between scanned the registry without it. A reload changes the lists before
        // its scan, so looking again now leaves no gap (the scan's own rule, `reload.rs`).
        if let Some(ip) = r.client.ip() {
            if !self.t.admits(ip) || !self.export.allows(ip) {
                r.client
                    .evict("its address is no longer on the allow-list (a reload)");
            }
        }
        self.registered = Some(r);
    }

    /// Why the target ends this connection, if it does: a reload removed its export or no
    /// longer admits its client. It then takes no new request, finishes the ones it has
    /// (within the shutdown timeout), and closes, as at a shutdown.
    pub fn evicted(&self) -> Option<String> {
        if let Some(why) = self.registered.as_ref().and_then(|r| r.client.evicted()) {
            return Some(why);
        }
        // One that attached as the reload took its export out, and was not there to evict.
        self.export
            .retired()
            .then(|| format!("export {} was removed by a reload", self.export.name))
    }

    /// The target stops, or ends this connection ([`Core::evicted`]).
    pub fn leaving(&self) -> bool {
        self.t.stopping() || self.evicted().is_some()
    }

    /// The client is trusted from now on (it proved its key; or, with no key, the connection
    /// is really up: established, or its first request came): the connection takes its place
    /// in the export's exclusive hold and in its fence. Before this it has built nothing a half-open connection or
    /// a client that never authenticates could keep from others. `Err` if another host took
    /// the export meanwhile (counted): the connection must go.
    pub fn confirm(&mut self) -> Result<(), &'static str> {
        if self.confirmed {
            return Ok(());
        }
        self.hold = self.export.hold(self.fence.ip, self.writes);
        if self.hold.is_none() {
            Stats::inc(&self.t.stats.exclusive_refusals);
            return Err(TAKEN);
        }
        // And in its fence: a closed fence stays while a trusted connection may still write.
        self.fence.join();
        self.confirmed = true;
        Ok(())
    }

    /// A free slot, if any.
    pub fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.stage == Stage::Free)
    }

    /// Requests taken and not yet released (stalled ones included).
    pub fn busy(&self) -> usize {
        self.slots.iter().filter(|s| s.stage != Stage::Free).count()
    }

    /// Requests in the hands of this side (not counting ones that will never be answered).
    pub fn working(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| !matches!(s.stage, Stage::Free | Stage::Stalled))
            .count()
    }

    /// A request arrived in slot `i` (free). `data`: a write's data, already received (TCP);
    /// otherwise the slot gets a buffer and the transport fetches it. `Err`: the connection
    /// must go (see [`Core::confirm`]); the slot stays free.
    pub fn start(&mut self, i: usize, req: Request, data: Option<Buf>) -> Result<(), &'static str> {
        self.confirm()?;
        self.begin(i, req, data);
        Ok(())
    }

    fn begin(&mut self, i: usize, req: Request, data: Option<Buf>) {
        let s = &mut self.slots[i];
        debug_assert_eq!(s.stage, Stage::Free);
        s.req = req;
        s.buf = data;
        s.op = None;
        s.fell_back = false;
        s.crc = 0;
        s.status = Status::Ok;
        s.arrived = Some(Instant::now());
        s.io_at = None;
        self.counters.request(req.opcode);
        self.export.counters.request(req.opcode);
        if let Err(st) = self.t.admit(&self.export, &req, !self.writes) {
            // Still checked: any request of a newer set moves the fence.
            let st = match self.enter(false) {
                Some(_) => st,
                None => Status::Fenced,
            };
            return self.answer(i, st);
        }
        if self.t.stalls(&req) {
            self.slots[i].stage = Stage::Stalled;
            return;
        }
        let (off, len) = (req.sector << SECTOR_SHIFT, req.length);
        match req.opcode {
            Opcode::Read | Opcode::Write if self.slots[i].buf.is_none() => {
                self.slots[i].stage = Stage::WaitBuf;
                self.waiting.push_back(i);
                self.serve_waiting();
            }
            Opcode::Write => self.data_in(i),
            Opcode::Read => unreachable!("a read comes without data"),
            Opcode::Flush => self.io(i, IoOp::Flush),
            Opcode::Discard => self.io(
                i,
                IoOp::PunchHole {
                    off,
                    len: u64::from(len),
                },
            ),
            Opcode::WriteZeroes => self.io(
                i,
                IoOp::ZeroRange {
                    off,
                    len: u64::from(len),
                },
            ),
            Opcode::Nop => {
                let st = match self.enter(false) {
                    Some(_) => Status::Ok,
                    None => Status::Fenced,
                };
                self.answer(i, st);
            }
            Opcode::Close => {
                let st = match self.enter(false).map(|_ticket| self.fence.close()) {
                    Some(Ok(())) => {
                        log::info!(
                            "{} {}: session {} closed; its fence goes once its connections are gone",
                            self.fence.ip,
                            self.fence.export,
                            self.fence.session
                        );
                        Status::Ok
                    }
                    _ => Status::Fenced,
                };
                self.answer(i, st);
            }
        }
    }

    /// Gives buffers to the slots waiting for one, in order, as far as they go.
    fn serve_waiting(&mut self) {
        while let Some(&i) = self.waiting.front() {
            let len = self.slots[i].req.length as usize;
            let b = match self.pool.get(len, self.kick.as_ref(), &mut self.demand) {
                Ok(Take::Got(b)) => b,
                Ok(Take::Short) => {
                    if !self.starved {
                        self.starved = true;
                        Stats::inc(&self.t.stats.buffer_waits);
                    }
                    return;
                }
                // Made off this thread for it; the kick says when.
                Ok(Take::Making) => return,
                Err(e) => {
                    log::error!("cannot make a data buffer: {e}");
                    self.demand = None;
                    self.waiting.pop_front();
                    self.answer(i, Status::IoError);
                    continue;
                }
            };
            self.waiting.pop_front();
            self.starved = false;
            let s = &mut self.slots[i];
            s.buf = Some(b);
            let req = s.req;
            match req.opcode {
                Opcode::Write => {
                    s.stage = Stage::Fetch;
                    self.to_fetch.push_back(i);
                }
                _ => self.io(
                    i,
                    IoOp::Read {
                        off: req.sector << SECTOR_SHIFT,
                        len: req.length,
                    },
                ),
            }
        }
    }

    /// Slot `i`'s write data is in its buffer.
    pub fn data_in(&mut self, i: usize) {
        let s = &self.slots[i];
        let n = s.req.length as usize;
        let ok = s
            .buf
            .as_ref()
            .is_some_and(|b| self.t.write_crc_ok(&s.req, &b.as_slice()[..n]));
        if !ok {
            return self.answer(i, Status::CrcMismatch);
        }
        let req = s.req;
        self.io(
            i,
            IoOp::Write {
                off: req.sector << SECTOR_SHIFT,
                len: req.length,
                fua: req.flags & rdmadisk_proto::wire::req_flags::FUA != 0,
            },
        );
    }

    /// Checks the fence for a request (see [`ConnFence::begin`]), counting and logging a move
    /// or a refusal. `None`: a modifying request of a superseded set, not to be applied.
    fn enter(&mut self, modifies: bool) -> Option<Ticket> {
        match self.fence.begin(modifies) {
            Ok(t) => {
                if t.moved {
                    Stats::inc(&self.t.stats.fence_moves);
                    log::info!(
                        "fence for {} {} moved to session {} epoch {}",
                        self.fence.ip,
                        self.fence.export,
                        self.fence.session,
                        self.fence.epoch
                    );
                }
                Some(t)
            }
            Err(_) => {
                Stats::inc(&self.t.stats.fenced_requests);
                if self.fence.first_fenced() {
                    let (fs, fe) = self.fence.current().unwrap_or((0, 0));
                    log::warn!(
                        "{} {}: session {} epoch {} is superseded (fence at session {fs} epoch {fe}); its writes are answered Fenced",
                        self.fence.ip, self.fence.export, self.fence.session, self.fence.epoch
                    );
                }
                None
            }
        }
    }

    /// Starts `op` for slot `i` under the fence.
    fn io(&mut self, i: usize, op: IoOp) {
        let modifies = self.slots[i].req.opcode.modifies();
        let Some(ticket) = self.enter(modifies) else {
            return self.answer(i, Status::Fenced);
        };
        if modifies && self.instance != self.export.backing.instance() {
            // Admitted before this gateway connected afresh to the store: superseded.
            Stats::inc(&self.t.stats.writes_refused_unlocked);
            return self.answer(i, Status::Fenced);
        }
        self.slots[i].ticket = Some(ticket);
        self.start_op(i, op);
    }

    fn start_op(&mut self, i: usize, op: IoOp) {
        let s = &mut self.slots[i];
        if syncs(op) && s.sync.is_none() {
            s.sync = Some(self.export.sync_begin());
        }
        s.op = Some(op);
        s.stage = Stage::Io;
        s.io_at.get_or_insert_with(Instant::now);
        let ptr = s
            .buf
            .as_mut()
            .map_or(std::ptr::null_mut(), |b| b.as_mut_slice().as_mut_ptr());
        // SAFETY: the buffer belongs to slot `i`, which stays in `Io` (nothing reads, writes or
        // frees the buffer) until this operation's completion comes back through `complete`;
        // teardown drains the ring first, and leaks the buffer if that fails (`Drop`).
        let r = unsafe {
            self.export
                .backing
                .start(&mut self.ring, op, ptr, UD_IO | i as u64)
        };
        if let Err(e) = r {
            let fenced_out = crate::backing::is_fenced_out(&e);
            if fenced_out {
                Stats::inc(&self.t.stats.writes_refused_unlocked);
            }
            log::error!("export {}: cannot start {op:?}: {e}", self.export.name);
            let s = &mut self.slots[i];
            s.op = None;
            s.ticket = None;
            // Never submitted: it took no error.
            if let Some(sync) = s.sync.take() {
                sync.end(None);
            }
            // Fenced, not an error: the client reissues it where the store is served now.
            self.answer(
                i,
                if fenced_out {
                    Status::Fenced
                } else {
                    Status::IoError
                },
            );
        }
    }

    /// A ring completion of a backing operation.
    pub fn complete(&mut self, d: Done) {
        let i = (d.user_data & !UD_KIND) as usize;
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        let Some(op) = s.op.take() else {
            return;
        };
        let res = d.result;
        if res < 0 && !s.fell_back {
            if let Some(next) = self.export.backing.fallback(op, -res) {
                s.fell_back = true;
                return self.start_op(i, next);
            }
        }
        let e = &self.export;
        let st = &self.t.stats;
        let errno = if res < 0 { -res } else { libc::EIO };
        // A gateway fenced out by another: what this target would have written is that one's
        // to write now, and this one must serve again once it takes the store back, so
        // nothing of it sticks to the export's later flushes.
        let fenced_out = res < 0 && e.backing.fenced_out(errno);
        let sticky = sticky(op, res).filter(|_| !fenced_out);
        let status = match op {
            IoOp::Read { len, .. } if res == len as i32 => {
                let data = &mut s.buf.as_mut().expect("a read has a buffer").as_mut_slice()
                    [..len as usize];
                s.crc = crc32c(data);
                self.t.maybe_corrupt_read(data);
                Stats::add(&st.bytes_read, u64::from(len));
                Stats::add(&self.counters.bytes_read, u64::from(len));
                Stats::add(&e.counters.bytes_read, u64::from(len));
                Status::Ok
            }
            IoOp::Write { len, .. } if res == len as i32 => {
                Stats::add(&st.bytes_written, u64::from(len));
                Stats::add(&self.counters.bytes_written, u64::from(len));
                Stats::add(&e.counters.bytes_written, u64::from(len));
                Status::Ok
            }
            // Durable only if nothing was lost before it either: see `settle`.
            IoOp::Flush if res == 0 => Status::Ok,
            IoOp::PunchHole { .. } | IoOp::ZeroRange { .. } if res == 0 => Status::Ok,
            IoOp::PunchHole { .. } | IoOp::ZeroRange { .. }
                if matches!(errno, libc::EOPNOTSUPP | libc::ENOSYS) =>
            {
                Status::Unsupported
            }
            _ => {
                Stats::inc(&st.io_errors);
                let err = if res < 0 {
                    std::io::Error::from_raw_os_error(errno).to_string()
                } else {
                    format!("short transfer ({res} bytes)")
                };
                if fenced_out && !matches!(op, IoOp::Read { .. } | IoOp::Flush) {
                    Stats::inc(&st.writes_refused_unlocked);
                }
                log::error!(
                    "export {}: {op:?} failed: {err}{}",
                    e.name,
                    if fenced_out {
                        " (another gateway took the store over: refused by the store)"
                    } else {
                        ""
                    }
                );
                if let Some(errno) = sticky {
                    e.record_error(errno);
                }
                // Another gateway serves the store now: the client reissues it there.
                if fenced_out {
                    Status::Fenced
                } else {
                    Status::IoError
                }
            }
        };
        // The I/O is over: the fence may move past it.
        s.ticket = None;
        if let Some(at) = s.io_at.take() {
            Stats::inc(&st.backing_ops);
            Stats::add(&st.backing_us, micros(at.elapsed()));
        }
        if let Some(sync) = s.sync.take() {
            sync.end(sticky);
            if status == Status::Ok {
                s.mark = e.sync_mark();
                return self.settle(i);
            }
        }
        self.answer(i, status);
    }

    /// Answers slot `i`'s successful Flush or FUA write once the export's flushes and FUA
    /// writes that may have taken a writeback error it must report have recorded it
    /// (`export::Syncs`); until then it waits in `Settle`, and a kick wakes it.
    fn settle(&mut self, i: usize) {
        if !self.export.settled(self.slots[i].mark, self.kick.as_ref()) {
            self.slots[i].stage = Stage::Settle;
            self.settling.push(i);
            return;
        }
        let what = match self.slots[i].req.opcode {
            Opcode::Flush => "flush",
            _ => "FUA write",
        };
        let status = match self.export.error() {
            None => Status::Ok,
            Some(err) => {
                log::error!(
                    "export {}: {what} answered failed: a write or flush failed before ({})",
                    self.export.name,
                    std::io::Error::from_raw_os_error(err)
                );
                Status::IoError
            }
        };
        self.answer(i, status);
    }

    /// Answers the settling slots whose wait is over.
    fn serve_settling(&mut self) {
        for i in std::mem::take(&mut self.settling) {
            self.settle(i);
        }
    }

    fn answer(&mut self, i: usize, status: Status) {
        self.counters.answered(status);
        self.export.counters.answered(status);
        let s = &mut self.slots[i];
        s.status = status;
        s.stage = Stage::Answer;
        self.to_answer.push_back(i);
    }

    /// The transport has posted (RDMA) or queued (TCP) slot `i`'s response: the request's
    /// time in the target ends here.
    pub fn responded(&mut self, i: usize) {
        if let Some(at) = self.slots[i].arrived.take() {
            let st = &self.t.stats;
            Stats::inc(&st.served);
            Stats::add(&st.service_us, micros(at.elapsed()));
        }
    }

    /// The transport is done with slot `i` (its response sent): the slot is free again.
    pub fn release(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        s.ticket = None;
        s.stage = Stage::Free;
        self.serve_waiting();
    }

    /// How long this connection may sleep with nothing under way: until the stop, if its
    /// ring waits for it, else a tick.
    pub fn idle_wait(&self) -> Duration {
        if self.stop_polled {
            self.t.idle_wait()
        } else {
            TICK
        }
    }

    /// Some slot waits for a data buffer (one of this connection's may come back).
    pub fn waits_for_buffers(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Waiting slots may find a buffer another connection gave back, and settling ones
    /// their answer.
    pub fn poll_waiting(&mut self) {
        if !self.waiting.is_empty() {
            self.serve_waiting();
        }
        if !self.settling.is_empty() {
            self.serve_settling();
        }
    }

    /// Takes ring completions (waiting up to `timeout` for one) and applies those of backing
    /// operations; returns the others (the transport's) in `other`, and how many backing
    /// completions there were.
    pub fn turn(
        &mut self,
        timeout: Option<Duration>,
        other: &mut Vec<Done>,
    ) -> std::io::Result<usize> {
        self.turn_for(timeout, 1, other)
    }

    /// [`Core::turn`], waiting for `want` completions rather than one (see [`Ring::wait_for`]).
    pub fn turn_for(
        &mut self,
        timeout: Option<Duration>,
        want: usize,
        other: &mut Vec<Done>,
    ) -> std::io::Result<usize> {
        let mut done = Vec::new();
        self.ring.wait_for(timeout, want, &mut done)?;
        let mut backing = 0;
        for d in done {
            if d.user_data & UD_KIND == UD_IO {
                backing += 1;
                self.complete(d);
            } else if d.user_data & UD_KIND == UD_STOP {
                // Readable for good now: not polled again (the loops check `stopping`).
                self.stop_polled = false;
            } else if d.user_data & UD_KIND == UD_KICK {
                // The transport's next pass looks at what waits (`poll_waiting`).
                self.kick_polled = match &self.kick {
                    Some(k) if d.result >= 0 => {
                        k.clear();
                        self.ring.poll_in(k.fd(), UD_KICK).is_ok()
                    }
                    _ => false,
                };
            } else {
                other.push(d);
            }
        }
        Ok(backing)
    }
}

impl Core {
    /// Waits for the ring's operations, until the teardown bound (one bound for the whole
    /// teardown, however often this is called), and applies the backing completions that
    /// come: their slots are no longer in flight. Returns the transport's completions.
    pub fn drain(&mut self) -> Vec<Done> {
        if std::mem::take(&mut self.stop_polled) {
            // It would never complete before the target stops.
            let _ = self.ring.cancel(UD_STOP);
        }
        if std::mem::take(&mut self.kick_polled) {
            let _ = self.ring.cancel(UD_KICK);
        }
        let until = *self
            .drain_until
            .get_or_insert_with(|| Instant::now() + DRAIN);
        let mut out = Vec::new();
        self.ring
            .drain(until.saturating_duration_since(Instant::now()), &mut out);
        let mut other = Vec::new();
        for d in out {
            if d.user_data & UD_KIND != UD_IO {
                other.push(d);
                continue;
            }
            let i = (d.user_data & !UD_KIND) as usize;
            if let Some(s) = self.slots.get_mut(i) {
                if let Some(op) = s.op.take() {
                    let lost = sticky(op, d.result);
                    if let Some(errno) = lost {
                        self.export.record_error(errno);
                    }
                    if let Some(sync) = s.sync.take() {
                        sync.end(lost);
                    }
                }
                s.ticket = None;
                s.stage = Stage::Answer;
            }
        }
        other
    }
}

/// Whether `op` may take a writeback error of the export's shared file (its errseq: a
/// fdatasync, or a write with RWF_DSYNC), and so has a [`SyncToken`].
fn syncs(op: IoOp) -> bool {
    matches!(op, IoOp::Flush | IoOp::Write { fua: true, .. })
}

/// The errno a failed operation leaves on its export for every later Flush and FUA write
/// (docs/design.md, "The target"): writes and flushes only; a failed read or discard loses
/// no data.
fn sticky(op: IoOp, res: i32) -> Option<i32> {
    let failed = match op {
        IoOp::Write { len, .. } => res != len as i32,
        IoOp::Flush | IoOp::ZeroRange { .. } => res < 0,
        IoOp::Read { .. } | IoOp::PunchHole { .. } => false,
    };
    failed.then_some(if res < 0 { -res } else { libc::EIO })
}

impl Drop for Core {
    /// No buffer may go while the kernel may still use it, no fence ticket while its write
    /// may still land, and no exclusive hold before this connection's last write: every
    /// operation in flight is waited for (within [`DRAIN`]). What is left after that (a store
    /// that hangs) is waited for with no limit, on this thread (only the thread that used a
    /// ring may reap it: see [`Ring`]), giving each ticket back as its operation completes and
    /// every buffer (a response being sent names one, on TCP) once the ring is idle. On a
    /// connection's thread ([`serve`]) that wait comes after the connection has let go of
    /// everything else (its place under the caps, its queue pair, its own buffers).
    fn drop(&mut self) {
        let _ = self.drain();
        if self.ring.inflight() == 0 {
            for s in &mut self.slots {
                if let Some(b) = s.buf.take() {
                    self.pool.put(b);
                }
            }
            return;
        }
        log::warn!(
            "export {}: {} operations still in flight after the connection ended: waiting for them apart",
            self.export.name,
            self.ring.inflight()
        );
        let mut left = Left {
            ring: None,
            tickets: Vec::new(),
            bufs: Vec::new(),
            _hold: self.hold.take(),
            export: self.export.clone(),
        };
        for (i, s) in self.slots.iter_mut().enumerate() {
            left.bufs.extend(s.buf.take());
            if let (Some(op), Some(t)) = (s.op.take(), s.ticket.take()) {
                left.tickets.push((i, op, t, s.sync.take()));
            }
        }
        // The ring moves out of the connection (a ring with operations in flight may be moved:
        // the kernel knows it by its fd, not by its address), but not to another thread.
        match Ring::new(8) {
            Ok(r) => left.ring = Some(std::mem::replace(&mut self.ring, r)),
            Err(e) => {
                log::error!("cannot wait for stuck I/O apart ({e}): keeping its memory for good");
                left.forget();
                return;
            }
        }
        // `Unreaped` keeps what it holds (leaked) rather than free what the kernel may still
        // use, if it is dropped unreaped (a panic on the way).
        let left = Unreaped(Some(left));
        let later = LEFT.try_with(|l| match l.borrow_mut().as_mut() {
            Some(v) => {
                v.push(left);
                None
            }
            None => Some(left),
        });
        match later {
            // A connection's thread: once the connection is gone.
            Ok(None) => {}
            // Any other thread (a test's, say): here and now.
            Ok(Some(left)) => reap(left),
            Err(_) => {
                log::error!("cannot wait for stuck I/O at thread exit: keeping its memory for good")
            }
        }
    }
}

thread_local! {
    /// On a connection's thread ([`serve`]): what its connection left in flight, waited for
    /// once the connection is gone.
    static LEFT: std::cell::RefCell<Option<Vec<Unreaped>>> = const { std::cell::RefCell::new(None) };
}

/// Runs a connection (`f`) on this thread, then waits here for the operations its ring still
/// had in flight when it ended (a store that hangs), if any: by then the connection has let go
/// of everything else. The wait stays on this thread because a ring's completions can only be
/// reaped by the thread that submitted to it (`IORING_SETUP_DEFER_TASKRUN`).
pub fn serve(f: impl FnOnce()) {
    let _ = LEFT.try_with(|l| *l.borrow_mut() = Some(Vec::new()));
    f();
    let left = LEFT
        .try_with(|l| l.borrow_mut().take())
        .ok()
        .flatten()
        .unwrap_or_default();
    for l in left {
        reap(l);
    }
}

/// What a connection leaves behind with operations still in flight.
struct Left {
    ring: Option<Ring>,
    /// Backing operations in flight: (slot, operation, fence ticket, flush or FUA token).
    tickets: Vec<(usize, IoOp, Ticket, Option<SyncToken>)>,
    bufs: Vec<Buf>,
    /// Dropped with the rest, once the ring is idle.
    _hold: Option<Hold>,
    export: Arc<Export>,
}

/// What is left for [`reap`]; if it never runs, what it holds is forgotten
/// ([`Left::forget`]).
struct Unreaped(Option<Left>);

impl Drop for Unreaped {
    fn drop(&mut self) {
        if let Some(left) = self.0.take() {
            left.forget();
        }
    }
}

impl Left {
    /// Keeps everything for good (the kernel may still use it), but for the flush and FUA
    /// tokens: their results will never be known, so they end as failed, and the export's
    /// other flushes stop waiting for them.
    fn forget(mut self) {
        for (_, _, _, sync) in &mut self.tickets {
            drop(sync.take());
        }
        std::mem::forget(self);
    }
}

/// Waits for the operations of a finished connection that were still in flight: each
/// ticket goes as its operation completes (recording a write's failure on the export), the
/// buffers and the hold once the ring is idle.
fn reap(mut left: Unreaped) {
    let Some(mut left) = left.0.take() else {
        return;
    };
    let Some(mut ring) = left.ring.take() else {
        return;
    };
    let t0 = Instant::now();
    let mut out = Vec::new();
    while ring.inflight() > 0 {
        out.clear();
        if ring.wait(Some(Duration::from_secs(1)), &mut out).is_err() {
            log::error!(
                "export {}: stuck I/O can no longer be waited for: keeping its memory for good",
                left.export.name
            );
            left.forget();
            std::mem::forget(ring);
            return;
        }
        for d in &out {
            if d.user_data & UD_KIND != UD_IO {
                continue;
            }
            let i = (d.user_data & !UD_KIND) as usize;
            if let Some(k) = left.tickets.iter().position(|(j, _, _, _)| *j == i) {
                let (_, op, ticket, sync) = left.tickets.swap_remove(k);
                let lost = sticky(op, d.result);
                if let Some(errno) = lost {
                    left.export.record_error(errno);
                }
                if let Some(sync) = sync {
                    sync.end(lost);
                }
                drop(ticket);
            }
        }
    }
    log::info!(
        "export {}: the last stuck operations completed after {} s",
        left.export.name,
        t0.elapsed().as_secs()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Budget;
    use crate::testkit::{self, answer, request, start, WritebackFails};

    /// Two connections of one export flush (or write FUA) at once, and the export's page cache
    /// has lost a write: the kernel reports that to the first of them to check, and the other
    /// succeeds. Whichever completion is seen first, neither may answer Ok: the one that
    /// succeeded waits until the other has recorded the error, and is woken for it at once.
    #[test]
    fn no_flush_answers_ok_past_a_writeback_error_another_connection_took() {
        use Opcode::{Flush, Write};
        let dir = tempfile::tempdir().unwrap();
        let fua = |tag| Request {
            flags: rdmadisk_proto::wire::req_flags::FUA,
            ..request(Write, tag, 8, &[7; 4096], 4096)
        };
        let flush = |tag| request(Flush, tag, 0, &[], 0);
        // (what takes the error, what succeeds)
        for (n, (taker, other)) in [(flush(1), flush(2)), (fua(1), flush(2)), (flush(1), fua(2))]
            .into_iter()
            .enumerate()
        {
            let b = WritebackFails::new(&dir.path().join(format!("e{n}")));
            let lost = b.lost();
            let t = testkit::target(vec![("e", Box::new(b))]);
            let pool = Pool::plain(1 << 20, &Budget::new(64 << 20, 1 << 20));
            let (mut a, mut c) = (
                testkit::core(&t, "e", 0, &pool),
                testkit::core(&t, "e", 1, &pool),
            );
            let data = |r: &Request| (r.opcode == Write).then_some(&[7u8; 4096][..]);
            // Both check the file after the error; `a` is told.
            lost.store(true, std::sync::atomic::Ordering::SeqCst);
            start(&mut a, 0, taker, data(&taker));
            start(&mut c, 0, other, data(&other));
            // `c`'s success is seen first: it must not answer yet.
            assert_eq!(
                answer(&mut c, Duration::from_millis(300)),
                None,
                "case {n}: answered before the error the other connection took was recorded"
            );
            assert_eq!(
                answer(&mut a, Duration::from_secs(5)),
                Some((0, Status::IoError)),
                "case {n}"
            );
            // `a`'s end woke `c`: its ring's wait ends at once, not at a tick.
            let t0 = Instant::now();
            c.turn(Some(2 * TICK), &mut Vec::new()).unwrap();
            let woken = t0.elapsed();
            assert!(woken < TICK / 4, "case {n}: woken after {woken:?}");
            assert_eq!(
                answer(&mut c, Duration::ZERO),
                Some((0, Status::IoError)),
                "case {n}"
            );
            // Sticky: both connections' later flushes fail too.
            for k in [&mut a, &mut c] {
                start(k, 1, flush(3), None);
                assert_eq!(
                    answer(k, Duration::from_secs(5)),
                    Some((1, Status::IoError))
                );
            }
        }
    }

    /// The fsync at shutdown is one of the export's flushes: a writeback error it takes is
    /// recorded, for a Flush of a connection still running then to report.
    #[test]
    fn the_fsync_at_shutdown_records_the_error_it_takes() {
        let dir = tempfile::tempdir().unwrap();
        let b = WritebackFails::new(&dir.path().join("e"));
        let lost = b.lost();
        let t = testkit::target(vec![("e", Box::new(b))]);
        let pool = Pool::plain(1 << 20, &Budget::new(64 << 20, 1 << 20));
        let mut c = testkit::core(&t, "e", 0, &pool);
        lost.store(true, std::sync::atomic::Ordering::SeqCst);
        t.sync_all();
        start(&mut c, 0, request(Opcode::Flush, 1, 0, &[], 0), None);
        assert_eq!(
            answer(&mut c, Duration::from_secs(5)),
            Some((0, Status::IoError))
        );
    }

    /// An export of 4096-byte blocks: a client is told so, a request whose offset or length
    /// is not a whole number of blocks is refused Invalid (on a live connection), and whole
    /// blocks are served.
    #[test]
    fn an_export_of_4096_byte_blocks_serves_whole_blocks_only() {
        use Opcode::{Discard, Read, Write, WriteZeroes};
        let dir = tempfile::tempdir().unwrap();
        let b = testkit::Blocks::new(&dir.path().join("e"), 4096);
        let t = testkit::target(vec![("e", Box::new(b))]);
        assert_eq!(
            t.hello_reply(&t.export("e").unwrap(), None)
                .logical_block_size,
            4096
        );
        let pool = Pool::plain(1 << 20, &Budget::new(64 << 20, 1 << 20));
        let mut c = testkit::core(&t, "e", 0, &pool);
        let mut run = |req: Request, data: Option<&[u8]>| {
            start(&mut c, 0, req, data);
            answer(&mut c, Duration::from_secs(5)).unwrap().1
        };
        let d = [0x5au8; 12288];
        // (sector, length): off by a sector, a sector long, a block and a half.
        for (sector, len) in [(1, 4096), (8, 512), (8, 6144), (4, 8192)] {
            let n = len as usize;
            assert_eq!(
                run(request(Write, 1, sector, &d[..n], len), Some(&d[..n])),
                Status::Invalid,
                "write {sector}+{len}"
            );
            for op in [Read, Discard, WriteZeroes] {
                assert_eq!(
                    run(request(op, 2, sector, &[], len), None),
                    Status::Invalid,
                    "{op:?} {sector}+{len}"
                );
            }
        }
        assert_eq!(
            t.stats
                .bound_violations
                .load(std::sync::atomic::Ordering::Relaxed),
            16
        );
        assert_eq!(run(request(Write, 3, 8, &d, 12288), Some(&d)), Status::Ok);
        assert_eq!(
            run(request(WriteZeroes, 5, 24, &[], 4096), None),
            Status::Ok
        );
        start(&mut c, 0, request(Read, 6, 8, &[], 12288), None);
        let (_, st, back) = testkit::answer_data(&mut c, Duration::from_secs(5)).unwrap();
        assert_eq!(st, Status::Ok);
        assert!(back[..8192] == d[..8192] && back[8192..].iter().all(|&x| x == 0));
    }

    /// Without a lost write, flushes and FUA writes of several connections all succeed, and
    /// none waits for a tick.
    #[test]
    fn flushes_and_fua_writes_of_several_connections_succeed_together() {
        let dir = tempfile::tempdir().unwrap();
        let b = WritebackFails::new(&dir.path().join("e"));
        let t = testkit::target(vec![("e", Box::new(b))]);
        let pool = Pool::plain(1 << 20, &Budget::new(64 << 20, 1 << 20));
        let mut cores: Vec<Core> = (0..3).map(|q| testkit::core(&t, "e", q, &pool)).collect();
        let t0 = Instant::now();
        for (k, c) in cores.iter_mut().enumerate() {
            for slot in 0..4 {
                let tag = (k * 4 + slot) as u32;
                if slot % 2 == 0 {
                    start(c, slot, request(Opcode::Flush, tag, 0, &[], 0), None);
                } else {
                    let d = [tag as u8; 4096];
                    let req = Request {
                        flags: rdmadisk_proto::wire::req_flags::FUA,
                        ..request(Opcode::Write, tag, 8 * u64::from(tag), &d, 4096)
                    };
                    start(c, slot, req, Some(&d));
                }
            }
        }
        // Each connection has a thread of its own: here they take turns.
        let mut answers = 0;
        while answers < 12 && t0.elapsed() < Duration::from_secs(5) {
            for c in &mut cores {
                if let Some((_, st)) = answer(c, Duration::from_millis(1)) {
                    assert_eq!(st, Status::Ok);
                    answers += 1;
                }
            }
        }
        assert_eq!(answers, 12);
        assert!(t0.elapsed() < TICK, "{:?}", t0.elapsed());
    }

    /// A store that hangs: what a connection still has in flight when it ends is waited for
    /// on the connection's own thread (only that thread may reap its ring), once the
    /// connection is gone; the thread ends when it completes.
    #[test]
    fn stuck_io_is_waited_for_on_the_connections_own_thread() {
        let dir = tempfile::tempdir().unwrap();
        let b = testkit::Hangs::new(&dir.path().join("e"));
        let release = b.releaser();
        let t = testkit::target(vec![("e", Box::new(b))]);
        let pool = Pool::plain(1 << 20, &Budget::new(64 << 20, 1 << 20));
        let (gone_tx, gone_rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            serve(move || {
                let mut c = testkit::core(&t, "e", 0, &pool);
                start(&mut c, 0, request(Opcode::Read, 1, 0, &[], 4096), None);
                // Waits for DRAIN, then leaves the operation for later.
                drop(c);
                gone_tx.send(()).unwrap();
            })
        });
        gone_rx
            .recv_timeout(DRAIN + Duration::from_secs(10))
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !h.is_finished(),
            "the thread stopped waiting for its stuck operation"
        );
        release();
        let t0 = Instant::now();
        while !h.is_finished() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(h.is_finished(), "the stuck operation's end was not seen");
        h.join().unwrap();
    }

    #[test]
    fn failed_writes_and_flushes_stick_and_nothing_else_does() {
        let w = IoOp::Write {
            off: 0,
            len: 4096,
            fua: false,
        };
        assert_eq!(sticky(w, 4096), None);
        assert_eq!(sticky(w, -libc::EIO), Some(libc::EIO));
        assert_eq!(sticky(w, 512), Some(libc::EIO), "a short write");
        assert_eq!(sticky(IoOp::Flush, 0), None);
        assert_eq!(sticky(IoOp::Flush, -libc::ENOSPC), Some(libc::ENOSPC));
        assert_eq!(
            sticky(IoOp::ZeroRange { off: 0, len: 8 }, -libc::EIO),
            Some(libc::EIO)
        );
        assert_eq!(sticky(IoOp::Read { off: 0, len: 8 }, -libc::EIO), None);
        assert_eq!(sticky(IoOp::PunchHole { off: 0, len: 8 }, -libc::EIO), None);
    }
}
