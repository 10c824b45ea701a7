//! Data buffers, from a budget shared by every connection of the target.
//!
//! A connection takes a buffer of `max_io_bytes` for each request that moves data, only for as
//! long as the request runs, and gives it back. Buffers are made on first need (registered
//! with the device, for RDMA) and kept for reuse, up to the target's budget
//! (`--buffer-memory`); a request that finds none free waits in its connection. So memory does
//! not grow with the number of connections, and an idle connection holds none.
//!
//! There is one pool per RDMA device (its buffers are registered in that device's protection
//! domain) and one for TCP; all of them draw on one [`Budget`].

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use rdmadisk_net::buf::AlignedBuf;
#[cfg(feature = "rdma")]
use rdmadisk_net::rdma::{Access, Mr, Pd};

/// Bytes of buffers the whole target may hold.
pub struct Budget {
    max: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    /// Every pool drawing on it, so that one short of buffers can have the others give back
    /// the free ones they keep (after a failover, say, TCP's would sit idle).
    pools: Mutex<Vec<Weak<Pool>>>,
    /// When a request last found no buffer: ms since `born`, plus one (0: never).
    last_short: AtomicU64,
    born: Instant,
}

impl Budget {
    pub fn new(max: usize) -> Arc<Budget> {
        Arc::new(Budget {
            max,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            pools: Mutex::new(Vec::new()),
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
        let mut v = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(p));
    }

    /// Frees the buffers every pool but `me` keeps unused.
    fn trim_others(&self, me: *const Pool) {
        let pools: Vec<Arc<Pool>> = self
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for p in pools.iter().filter(|p| !std::ptr::eq(Arc::as_ptr(p), me)) {
            p.trim();
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

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes of buffers in existence now, and at most so far.
    pub fn used(&self) -> (usize, usize) {
        (
            self.used.load(Ordering::Relaxed),
            self.peak.load(Ordering::Relaxed),
        )
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

enum Kind {
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

/// Buffers of one size for one device (or for TCP).
pub struct Pool {
    buf_len: usize,
    #[cfg(feature = "rdma")]
    pd: Option<Arc<Pd>>,
    budget: Arc<Budget>,
    free: Mutex<Vec<Buf>>,
}

impl Pool {
    /// A pool of plain buffers (TCP).
    pub fn plain(buf_len: usize, budget: &Arc<Budget>) -> Arc<Pool> {
        let p = Arc::new(Pool {
            buf_len,
            #[cfg(feature = "rdma")]
            pd: None,
            budget: budget.clone(),
            free: Mutex::new(Vec::new()),
        });
        budget.register(&p);
        p
    }

    /// A pool of buffers registered in `pd` for local writes (the target's RDMA Reads land
    /// there; its RDMA Writes read from there).
    #[cfg(feature = "rdma")]
    pub fn registered(buf_len: usize, pd: &Arc<Pd>, budget: &Arc<Budget>) -> Arc<Pool> {
        let p = Arc::new(Pool {
            buf_len,
            pd: Some(pd.clone()),
            budget: budget.clone(),
            free: Mutex::new(Vec::new()),
        });
        budget.register(&p);
        p
    }

    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// A buffer, if one is free or the budget allows a new one. `Err` only when making a new
    /// one failed (registration, say).
    pub fn get(&self) -> io::Result<Option<Buf>> {
        if let Some(b) = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Ok(Some(b));
        }
        if !self.budget.take(self.buf_len) {
            self.budget.trim_others(self);
            if !self.budget.take(self.buf_len) {
                let b = &self.budget;
                b.last_short.store(b.now_ms(), Ordering::Relaxed);
                return Ok(None);
            }
        }
        let made = (|| -> io::Result<Kind> {
            #[cfg(feature = "rdma")]
            if let Some(pd) = &self.pd {
                return Ok(Kind::Registered(Mr::new(
                    pd,
                    self.buf_len,
                    Access::LOCAL_WRITE,
                )?));
            }
            Ok(Kind::Plain(AlignedBuf::new(self.buf_len)))
        })();
        match made {
            Ok(kind) => Ok(Some(Buf {
                kind,
                budget: self.budget.clone(),
            })),
            Err(e) => {
                self.budget.give(self.buf_len);
                Err(e)
            }
        }
    }

    /// Frees the buffers kept for reuse, giving their bytes back to the budget.
    pub fn trim(&self) {
        drop(std::mem::take(
            &mut *self.free.lock().unwrap_or_else(PoisonError::into_inner),
        ));
    }

    /// Gives a buffer back for reuse.
    pub fn put(&self, b: Buf) {
        debug_assert_eq!(b.len(), self.buf_len);
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_every_pool() {
        let b = Budget::new(3 * 4096);
        let p = Pool::plain(4096, &b);
        let q = Pool::plain(4096, &b);
        let x = p.get().unwrap().unwrap();
        let y = p.get().unwrap().unwrap();
        let z = q.get().unwrap().unwrap();
        assert!(p.get().unwrap().is_none(), "budget spent");
        assert!(q.get().unwrap().is_none());
        assert_eq!(b.used(), (3 * 4096, 3 * 4096));
        p.put(x);
        // q is short: p gives back the one it keeps unused.
        let w = q.get().unwrap().unwrap();
        assert!(p.get().unwrap().is_none());
        q.put(w);
        let x = p.get().unwrap().unwrap();
        assert_eq!(x.len(), 4096);
        p.put(x);
        p.put(y);
        drop(p);
        assert_eq!(b.used().0, 4096, "a dropped pool returns its buffers");
        // One dropped in use (a connection torn down mid-request) returns its bytes too.
        drop(z);
        assert_eq!(b.used(), (0, 3 * 4096));
        let x = q.get().unwrap().unwrap();
        q.put(x);
        drop(q);
        assert_eq!(b.used().0, 0);
    }
}
