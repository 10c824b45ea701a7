//! Buffers, from a budget shared by every connection of the target.
//!
//! Everything a connection holds in memory on a client's behalf counts against one
//! [`Budget`] (`--buffer-memory`): the data buffers of its requests, and its own fixed
//! buffers (RDMA receive and send buffers, the TCP receive staging buffer), which it
//! [reserves](Budget::reserve) at attach and holds until it ends.
//!
//! A request that moves data takes a buffer of the smallest size class that fits it (powers
//! of two from 4 KiB, and `max_io_bytes`), only for as long as it runs, and gives it back.
//! Buffers are kept for reuse, and freed when another size or another pool is short of
//! budget. A request that finds none waits in its connection, whose eventfd (`Core::kick`)
//! is signalled as soon as a buffer comes back or budget frees up. So memory does not grow
//! with the number of connections, and an idle connection holds no data buffer.
//!
//! There is one pool per RDMA device (its buffers are registered in that device's protection
//! domain) and one for TCP; all of them draw on one budget. A registered buffer is made (and
//! unregistered) by its pool's own thread, never by a connection's: `ibv_reg_mr` pins every
//! page of the buffer, which takes long enough to hold up the other requests of the
//! connection.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use rdmadisk_net::buf::AlignedBuf;
#[cfg(feature = "rdma")]
use rdmadisk_net::rdma::{Access, Mr, Pd};

use crate::wake::{Waiters, Wake};

/// The smallest buffer: a page (O_DIRECT alignment, and the largest block size).
pub const MIN_BUF: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Bytes of buffers the whole target may hold.
pub struct Budget {
    max: usize,
    /// What connections' own buffers may take in all: the rest (`max_io_bytes` at least)
    /// stays for data buffers, so that a request of any size can always be served.
    fixed_max: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    /// Bytes of connections' own buffers ([`Reservation`]s).
    fixed: Mutex<usize>,
    /// Every pool drawing on it, so that one short of buffers can have the others give back
    /// the free ones they keep (after a failover, say, TCP's would sit idle).
    pools: Mutex<Vec<Weak<Pool>>>,
    /// Connections with a request waiting for a buffer.
    waiters: Waiters,
    /// Data buffers made so far (and registered, for RDMA), in all pools.
    made: AtomicU64,
    /// When a request last found no buffer: ms since `born`, plus one (0: never).
    last_short: AtomicU64,
    born: Instant,
}

impl Budget {
    /// `max` bytes, of which `data_min` stay for data buffers.
    pub fn new(max: usize, data_min: usize) -> Arc<Budget> {
        Arc::new(Budget {
            max,
            fixed_max: max.saturating_sub(data_min),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            fixed: Mutex::new(0),
            pools: Mutex::new(Vec::new()),
            waiters: Waiters::default(),
            made: AtomicU64::new(0),
            last_short: AtomicU64::new(0),
            born: Instant::now(),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    /// Whether some request found no buffer within the last second: connections then give
    /// theirs back as soon as they can (see `rdma::Conn::need_sends`).
    pub fn short_recently(&self) -> bool {
        let at = self.last_short.load(Ordering::Relaxed);
        at != 0 && self.now_ms().saturating_sub(at) < 1000
    }

    fn register(&self, p: &Arc<Pool>) {
        let mut v = lock(&self.pools);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(p));
    }

    /// Frees the buffers every pool keeps unused (`here`: on this thread; else registered
    /// ones on their pool's thread, and their bytes come back a moment later).
    fn trim_all(&self, here: bool) {
        let pools: Vec<Arc<Pool>> = lock(&self.pools).iter().filter_map(Weak::upgrade).collect();
        for p in pools {
            p.trim(here);
        }
    }

    fn take(&self, n: usize) -> bool {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            if cur + n > self.max {
                return false;
            }
            match self
                .used
                .compare_exchange(cur, cur + n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.peak.fetch_max(cur + n, Ordering::Relaxed);
                    return true;
                }
                Err(c) => cur = c,
            }
        }
    }

    /// Takes `n` bytes, freeing the buffers kept for reuse if that is what it takes (see
    /// [`Budget::trim_all`] for `here`).
    fn take_or_trim(&self, n: usize, here: bool) -> bool {
        if self.take(n) {
            return true;
        }
        self.trim_all(here);
        self.take(n)
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
        self.waiters.wake_all();
    }

    /// `w` is woken when a buffer comes back or bytes free up.
    pub fn want(&self, w: &Arc<Wake>) {
        self.waiters.add(w);
    }

    /// Bytes held now (data buffers and connections' own), and at most so far.
    pub fn used(&self) -> (usize, usize) {
        (
            self.used.load(Ordering::Relaxed),
            self.peak.load(Ordering::Relaxed),
        )
    }

    /// Bytes of connections' own buffers now.
    pub fn fixed(&self) -> usize {
        *lock(&self.fixed)
    }

    /// Data buffers made so far.
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// The budget's size.
    pub fn max(&self) -> usize {
        self.max
    }

    /// `n` bytes of a connection's own buffers, held until the reservation is dropped; `None`
    /// if they do not fit: with the other connections' they may not take more than what is
    /// left once `max_io_bytes` is kept for data, and the bytes must be free now (buffers
    /// kept for reuse are freed for them).
    pub fn reserve(self: &Arc<Self>, n: usize) -> Option<Reservation> {
        let mut fixed = lock(&self.fixed);
        // (Off the data path: kept buffers may be unregistered here.)
        if *fixed + n > self.fixed_max || !self.take_or_trim(n, true) {
            return None;
        }
        *fixed += n;
        Some(Reservation {
            budget: self.clone(),
            n,
        })
    }
}

/// A connection's own buffers' share of the [`Budget`], given back on drop.
pub struct Reservation {
    budget: Arc<Budget>,
    n: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        *lock(&self.budget.fixed) -= self.n;
        self.budget.give(self.n);
    }
}

/// One data buffer: page aligned (O_DIRECT), registered with the device for RDMA. Its bytes
/// count against the [`Budget`] for as long as it exists, wherever it is dropped (a
/// connection torn down in the middle of a request, say); only a buffer deliberately leaked
/// (one the kernel may still write into) keeps them.
pub struct Buf {
    kind: Kind,
    budget: Arc<Budget>,
}

/// What a buffer is made of.
pub enum Kind {
    Plain(AlignedBuf),
    #[cfg(feature = "rdma")]
    Registered(Mr),
}

impl Buf {
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Plain(b) => b.len(),
            #[cfg(feature = "rdma")]
            Kind::Registered(m) => m.len(),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.kind {
            Kind::Plain(b) => b,
            #[cfg(feature = "rdma")]
            Kind::Registered(m) => m,
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.kind {
            Kind::Plain(b) => b,
            #[cfg(feature = "rdma")]
            Kind::Registered(m) => m,
        }
    }

    /// The registration, for RDMA work requests.
    #[cfg(feature = "rdma")]
    pub fn mr(&self) -> Option<&Mr> {
        match &self.kind {
            Kind::Registered(m) => Some(m),
            Kind::Plain(_) => None,
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        self.budget.give(self.len());
    }
}

/// How a pool makes a buffer of a given size, on its own thread.
pub type MakeFn = Box<dyn Fn(usize) -> io::Result<Kind> + Send + Sync>;

/// Work for a pool's thread.
enum Job {
    /// Make a buffer of this class; its bytes are taken already.
    Make(usize),
    /// Free these (unregistering them).
    Drop(Vec<Buf>),
}

/// A pool whose buffers its own thread makes.
struct Ahead {
    make: MakeFn,
    jobs: Mutex<mpsc::Sender<Job>>,
    /// Per class: buffers being made, and requests waiting for one ([`Demand`]): no more
    /// are made than wait.
    counts: Mutex<(Vec<usize>, Vec<usize>)>,
    /// Why the last make failed, for the next request to ask.
    failed: Mutex<Option<io::Error>>,
}

/// A request waiting for a buffer of a pool whose buffers are made ahead: it counts in the
/// pool's demand until it is served (or goes), so that one is made for it, and one only.
pub struct Demand {
    pool: Weak<Pool>,
    class: usize,
}

impl Drop for Demand {
    fn drop(&mut self) {
        if let Some(a) = self.pool.upgrade().as_ref().and_then(|p| p.ahead.as_ref()) {
            lock(&a.counts).1[self.class] -= 1;
        }
    }
}

/// What [`Pool::get`] found.
pub enum Take {
    Got(Buf),
    /// The budget is spent.
    Short,
    /// One is being made, off this thread.
    Making,
}

/// Buffers of every size class for one device (or for TCP).
pub struct Pool {
    /// Sizes, smallest first: powers of two from [`MIN_BUF`], and the largest I/O last.
    classes: Vec<usize>,
    budget: Arc<Budget>,
    /// Per class, buffers kept for reuse.
    free: Mutex<Vec<Vec<Buf>>>,
    /// `None`: plain buffers, made on the spot (an allocation, no system call but page
    /// faults).
    ahead: Option<Ahead>,
}

/// The size classes for requests of at most `max_len` bytes.
pub fn classes(max_len: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(MIN_BUF), |&c| Some(c * 2))
        .take_while(|&c| c < max_len)
        .collect();
    v.push(max_len.max(MIN_BUF));
    v
}

impl Pool {
    fn new(max_len: usize, budget: &Arc<Budget>, make: Option<MakeFn>) -> Arc<Pool> {
        let classes = classes(max_len);
        let n = classes.len();
        let (tx, rx) = mpsc::channel();
        let ahead = make.is_some();
        let p = Arc::new(Pool {
            classes,
            budget: budget.clone(),
            free: Mutex::new((0..n).map(|_| Vec::new()).collect()),
            ahead: make.map(|make| Ahead {
                make,
                jobs: Mutex::new(tx),
                counts: Mutex::new((vec![0; n], vec![0; n])),
                failed: Mutex::new(None),
            }),
        });
        if ahead {
            let weak = Arc::downgrade(&p);
            let started = std::thread::Builder::new()
                .name("buffers".into())
                .spawn(move || maker(weak, rx));
            if let Err(e) = started {
                // Its requests are answered with the error (`Pool::get`).
                if let Some(a) = &p.ahead {
                    *lock(&a.failed) = Some(e);
                }
            }
        }
        budget.register(&p);
        p
    }

    /// A pool of plain buffers (TCP).
    pub fn plain(max_len: usize, budget: &Arc<Budget>) -> Arc<Pool> {
        Pool::new(max_len, budget, None)
    }

    /// A pool of buffers registered in `pd` for local writes (the target's RDMA Reads land
    /// there; its RDMA Writes read from there).
    #[cfg(feature = "rdma")]
    pub fn registered(max_len: usize, pd: &Arc<Pd>, budget: &Arc<Budget>) -> Arc<Pool> {
        let pd = pd.clone();
        let make: MakeFn =
            Box::new(move |len| Ok(Kind::Registered(Mr::new(&pd, len, Access::LOCAL_WRITE)?)));
        Pool::new(max_len, budget, Some(make))
    }

    /// A pool whose buffers `make` makes on the pool's thread (what RDMA's do), for tests.
    #[cfg(test)]
    pub fn made_ahead(max_len: usize, budget: &Arc<Budget>, make: MakeFn) -> Arc<Pool> {
        Pool::new(max_len, budget, Some(make))
    }

    /// The largest buffer.
    pub fn max_len(&self) -> usize {
        self.classes[self.classes.len() - 1]
    }

    fn class_of(&self, len: usize) -> Option<usize> {
        self.classes.iter().position(|&c| c >= len)
    }

    fn pop(&self, class: usize) -> Option<Buf> {
        lock(&self.free)[class].pop()
    }

    /// A new plain buffer of `size` bytes, which the caller has taken from the budget.
    fn plain_buf(&self, size: usize) -> Buf {
        self.budget.made.fetch_add(1, Ordering::Relaxed);
        Buf {
            kind: Kind::Plain(AlignedBuf::new(size)),
            budget: self.budget.clone(),
        }
    }

    /// A buffer of at least `len` bytes, if one is free or the budget allows a new one now.
    /// If not, `wake` is woken when one may be had (a buffer comes back, bytes free up, one
    /// was made): ask again then, with the same `demand`, which keeps the request counted
    /// while it waits in a pool that makes its buffers ahead (drop it if the request goes).
    /// `Err`: no buffer can be made for it (registration failed, say).
    pub fn get(
        self: &Arc<Self>,
        len: usize,
        wake: Option<&Arc<Wake>>,
        demand: &mut Option<Demand>,
    ) -> io::Result<Take> {
        let c = self.class_of(len).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "larger than the largest I/O")
        })?;
        let size = self.classes[c];
        let got = |demand: &mut Option<Demand>, b| {
            *demand = None;
            Ok(Take::Got(b))
        };
        if let Some(b) = self.pop(c) {
            return got(demand, b);
        }
        if self.ahead.is_none() && self.budget.take_or_trim(size, false) {
            return got(demand, self.plain_buf(size));
        }
        // About to wait: asked before looking again, so that a buffer that comes back in
        // between (or one made for it) wakes it.
        if let Some(w) = wake {
            self.budget.want(w);
        }
        if let Some(b) = self.pop(c) {
            return got(demand, b);
        }
        let short = || {
            let b = &self.budget;
            b.last_short.store(b.now_ms(), Ordering::Relaxed);
            Ok(Take::Short)
        };
        let Some(a) = &self.ahead else {
            if self.budget.take(size) {
                return got(demand, self.plain_buf(size));
            }
            return short();
        };
        if let Some(e) = lock(&a.failed).take() {
            *demand = None;
            return Err(e);
        }
        let mut counts = lock(&a.counts);
        if demand.is_none() {
            counts.1[c] += 1;
            *demand = Some(Demand {
                pool: Arc::downgrade(self),
                class: c,
            });
        }
        if counts.0[c] >= counts.1[c] {
            return Ok(Take::Making);
        }
        if !self.budget.take_or_trim(size, false) {
            return short();
        }
        if lock(&a.jobs).send(Job::Make(c)).is_err() {
            self.budget.give(size);
            return Err(io::Error::other("the pool's thread is gone"));
        }
        counts.0[c] += 1;
        Ok(Take::Making)
    }

    /// Frees the buffers kept for reuse, giving their bytes back to the budget: here, or
    /// (`here` false, on a connection's thread) registered ones on the pool's thread, which
    /// unregisters them.
    pub fn trim(&self, here: bool) {
        let bufs: Vec<Buf> = lock(&self.free)
            .iter_mut()
            .flat_map(std::mem::take)
            .collect();
        if bufs.is_empty() || here {
            return;
        }
        if let Some(a) = &self.ahead {
            // If the thread is gone, they go here after all.
            let _ = lock(&a.jobs).send(Job::Drop(bufs));
        }
    }

    /// Gives a buffer back for reuse.
    pub fn put(&self, b: Buf) {
        let Some(c) = self.classes.iter().position(|&c| c == b.len()) else {
            debug_assert!(false, "a buffer of {} bytes", b.len());
            return;
        };
        lock(&self.free)[c].push(b);
        self.budget.waiters.wake_all();
    }
}

/// A pool's own thread: makes the buffers its requests wait for, and frees the ones trimmed.
fn maker(pool: Weak<Pool>, jobs: mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let c = match job {
            Job::Drop(bufs) => {
                drop(bufs);
                continue;
            }
            Job::Make(c) => c,
        };
        let Some(p) = pool.upgrade() else {
            return;
        };
        let Some(a) = &p.ahead else {
            return;
        };
        let size = p.classes[c];
        let made = (a.make)(size);
        lock(&a.counts).0[c] -= 1;
        match made {
            Ok(kind) => {
                p.budget.made.fetch_add(1, Ordering::Relaxed);
                p.put(Buf {
                    kind,
                    budget: p.budget.clone(),
                });
            }
            Err(e) => {
                log::error!("cannot make a data buffer of {size} bytes: {e}");
                *lock(&a.failed) = Some(e);
                p.budget.give(size);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::wake::readable;

    /// Waits up to `limit` for `w`; how long it took, if it came.
    fn woken(w: &Wake, limit: Duration) -> Option<Duration> {
        let t0 = Instant::now();
        (readable(&[Some(w.fd())], Some(limit)).unwrap() != 0).then(|| t0.elapsed())
    }

    fn get(p: &Arc<Pool>, len: usize) -> Option<Buf> {
        match p.get(len, None, &mut None).unwrap() {
            Take::Got(b) => Some(b),
            _ => None,
        }
    }

    #[test]
    fn the_budget_bounds_every_pool() {
        let b = Budget::new(3 * 4096, 4096);
        let p = Pool::plain(4096, &b);
        let q = Pool::plain(4096, &b);
        let x = get(&p, 4096).unwrap();
        let y = get(&p, 4096).unwrap();
        let z = get(&q, 4096).unwrap();
        assert!(get(&p, 4096).is_none(), "budget spent");
        assert!(get(&q, 4096).is_none());
        assert_eq!(b.used(), (3 * 4096, 3 * 4096));
        p.put(x);
        // q is short: p gives back the one it keeps unused.
        let w = get(&q, 4096).unwrap();
        assert!(get(&p, 4096).is_none());
        q.put(w);
        let x = get(&p, 4096).unwrap();
        assert_eq!(x.len(), 4096);
        p.put(x);
        p.put(y);
        drop(p);
        assert_eq!(b.used().0, 4096, "a dropped pool returns its buffers");
        // One dropped in use (a connection torn down mid-request) returns its bytes too.
        drop(z);
        assert_eq!(b.used(), (0, 3 * 4096));
        let x = get(&q, 4096).unwrap();
        q.put(x);
        drop(q);
        assert_eq!(b.used().0, 0);
    }

    #[test]
    fn a_request_takes_the_smallest_class_that_fits() {
        assert_eq!(
            classes(1 << 20),
            [
                4096,
                8192,
                16384,
                32768,
                65536,
                131072,
                262144,
                524288,
                1 << 20
            ]
        );
        assert_eq!(classes(12288), [4096, 8192, 12288]);
        assert_eq!(classes(4096), [4096]);
        let b = Budget::new(256 << 20, 1 << 20);
        let p = Pool::plain(1 << 20, &b);
        for (len, got) in [
            (512, 4096),
            (4096, 4096),
            (5000, 8192),
            (600 << 10, 1 << 20),
        ] {
            let x = get(&p, len).unwrap();
            assert_eq!(x.len(), got, "{len}");
            p.put(x);
        }
        assert!(p.get((1 << 20) + 1, None, &mut None).is_err());
    }

    /// Under the default budget (256 MiB, requests of up to 1 MiB), 4 KiB requests are not
    /// held to the 256 that buffers of the largest size would allow.
    #[test]
    fn small_requests_are_not_limited_by_the_largest_size() {
        let b = Budget::new(256 << 20, 1 << 20);
        let p = Pool::plain(1 << 20, &b);
        let held: Vec<Buf> = (0..300).map_while(|_| get(&p, 4096)).collect();
        assert_eq!(held.len(), 300);
        assert_eq!(b.used().0, 300 * 4096);
        // And a large one still fits beside them.
        assert!(get(&p, 1 << 20).is_some());
    }

    /// A request that finds no buffer is woken as soon as one comes back, or its bytes do,
    /// or a connection's own buffers go: not at the next tick.
    #[test]
    fn a_waiter_is_woken_when_a_buffer_or_its_bytes_come_back() {
        let b = Budget::new(8192, 4096);
        let p = Pool::plain(4096, &b);
        let w = Arc::new(Wake::new().unwrap());
        for how in ["put", "drop", "reservation"] {
            let held = get(&p, 4096).unwrap();
            let mem = b.reserve(4096).unwrap();
            assert!(matches!(
                p.get(4096, Some(&w), &mut None).unwrap(),
                Take::Short
            ));
            let pp = p.clone();
            let freed = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let at = Instant::now();
                // What is not given back here is given back after the check.
                let keep = match how {
                    "put" => {
                        pp.put(held);
                        mem
                    }
                    "drop" => {
                        drop(held);
                        mem
                    }
                    _ => {
                        drop(mem);
                        return (at, Some(held), None);
                    }
                };
                (at, None, Some(keep))
            });
            assert!(
                woken(&w, Duration::from_secs(2)).is_some(),
                "{how}: not woken"
            );
            let (at, held, mem) = freed.join().unwrap();
            let late = at.elapsed();
            println!("{how}: woken {late:?} after the bytes came back");
            assert!(late < Duration::from_millis(50), "{how}: {late:?}");
            w.clear();
            let x = get(&p, 4096).unwrap();
            drop((x, held, mem));
            p.trim(true);
        }
    }

    /// Buffers of a pool that registers them (RDMA's) are made on its own thread, never on
    /// the connection's that asked: one per request that waits, none once they are kept for
    /// reuse.
    #[test]
    fn registered_buffers_are_made_off_the_data_path() {
        let here = std::thread::current().id();
        let made: Arc<Mutex<Vec<(std::thread::ThreadId, usize)>>> = Arc::default();
        let m = made.clone();
        let make: MakeFn = Box::new(move |len| {
            m.lock().unwrap().push((std::thread::current().id(), len));
            // Pinning pages takes a while.
            std::thread::sleep(Duration::from_millis(2));
            Ok(Kind::Plain(AlignedBuf::new(len)))
        });
        let b = Budget::new(64 << 20, 1 << 20);
        let p = Pool::made_ahead(1 << 20, &b, make);
        let w = Arc::new(Wake::new().unwrap());
        // A connection with four requests waiting: each gets one buffer made for it.
        let take = |len: usize| -> Buf {
            let mut demand = None;
            loop {
                match p.get(len, Some(&w), &mut demand).unwrap() {
                    Take::Got(b) => return b,
                    Take::Short => panic!("short"),
                    Take::Making => {
                        woken(&w, Duration::from_secs(2)).expect("not woken when made");
                        w.clear();
                    }
                }
            }
        };
        let sizes = [4096, 4096, 65536, 1 << 20];
        let held: Vec<Buf> = sizes.iter().map(|&len| take(len)).collect();
        for x in held {
            p.put(x);
        }
        let warm = made.lock().unwrap().clone();
        assert_eq!(warm.len(), 4, "{warm:?}");
        // Warm: served from the kept ones, nothing made.
        for &len in &sizes[1..] {
            let x = take(len);
            p.put(x);
        }
        let all = made.lock().unwrap().clone();
        assert_eq!(all.len(), 4, "made again after warm-up: {all:?}");
        let in_path = all.iter().filter(|(t, _)| *t == here).count();
        assert_eq!(
            in_path, 0,
            "registrations on the requesting thread: {all:?}"
        );
        assert_eq!(b.made(), 4);
    }

    /// A connection's own buffers count in the budget: they may not take what the largest
    /// request needs, nor bytes held by data buffers in use; kept ones are freed for them.
    #[test]
    fn a_connection_whose_own_buffers_do_not_fit_is_refused() {
        let b = Budget::new((1 << 20) + (128 << 10), 1 << 20);
        let one = b.reserve(64 << 10).unwrap();
        let two = b.reserve(64 << 10).unwrap();
        assert!(b.reserve(4096).is_none(), "max_io_bytes stays for data");
        assert_eq!(b.fixed(), 128 << 10);
        drop(one);
        let p = Pool::plain(1 << 20, &b);
        let held = get(&p, 1 << 20).unwrap();
        assert!(
            b.reserve(64 << 10).is_some(),
            "fits beside a data buffer in use"
        );
        let big = Budget::new(3 << 20, 1 << 20);
        let q = Pool::plain(1 << 20, &big);
        let x = get(&q, 1 << 20).unwrap();
        let y = get(&q, 1 << 20).unwrap();
        assert!(big.reserve(2 << 20).is_none(), "data buffers in use");
        q.put(x);
        q.put(y);
        assert!(
            big.reserve(2 << 20).is_some(),
            "kept buffers are freed for it"
        );
        drop((two, held));
        assert_eq!(b.fixed(), 0);
        // What an RDMA connection reserves: its receives and its send buffers.
        assert_eq!(
            crate::engine::rdma_conn_bytes(32, 4096),
            32 * 4160 + 72 * 64
        );
        assert_eq!(
            crate::engine::rdma_conn_bytes(1024, 64 << 10),
            1024 * 65600 + 2056 * 64
        );
    }
}
