//! Ceph RBD for rdmadisk-target: the raw librados and librbd bindings ([`sys`], made by bindgen
//! from the installed headers) and a small safe layer over them.
//!
//! - [`Cluster::connect`]: a ceph.conf, a client name and a keyring.
//! - [`Image::open`]: an image of a pool, its size, its exclusive lock, and
//!   [`Image::watch_updates`] to hear of a resize.
//! - Asynchronous read, write, flush, discard and write-zeroes. Each completion goes to a
//!   [`Complete`] with the caller's tag, on one of librbd's own threads: no thread per request
//!   and no blocking call on the caller's side. The target's rings turn those into ring
//!   completions (rdmadisk-target's `ring.rs`, its mailbox).
//!
//! librados and librbd are thread-safe: a cluster handle, a pool's I/O context and an open image
//! may be used from any thread, and an image's asynchronous calls may run concurrently.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::{Arc, Mutex, PoisonError};

/// The raw bindings: every `rados_*` and `rbd_*` function, type and constant.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

/// A librados or librbd call that failed: what was asked and the errno it gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub what: String,
    pub errno: i32,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn new(what: impl Into<String>, errno: i32) -> Error {
        Error {
            what: what.into(),
            errno,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Ceph's EBLOCKLISTED is ESHUTDOWN, whose text says nothing about Ceph.
        if self.errno == libc::ESHUTDOWN {
            return write!(
                f,
                "{}: this client is blocklisted by the cluster",
                self.what
            );
        }
        write!(
            f,
            "{}: {}",
            self.what,
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(io::Error::from_raw_os_error(e.errno).kind(), e.to_string())
    }
}

/// `r` as a result: librados and librbd return `-errno` on failure.
fn check(what: impl FnOnce() -> String, r: c_int) -> Result<c_int> {
    if r < 0 {
        Err(Error::new(what(), -r))
    } else {
        Ok(r)
    }
}

fn cstring(what: &str, s: &[u8]) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(format!("{what}: contains a NUL byte"), libc::EINVAL))
}

struct ClusterHandle(sys::rados_t);

// SAFETY: librados is thread-safe: a `rados_t` may be used and shut down from any thread.
unsafe impl Send for ClusterHandle {}
// SAFETY: as for Send; concurrent calls on one handle are supported.
unsafe impl Sync for ClusterHandle {}

impl Drop for ClusterHandle {
    fn drop(&mut self) {
        // SAFETY: a handle from rados_create2, shut down once, after every pool (I/O context)
        // made from it: they hold an Arc to this.
        unsafe { sys::rados_shutdown(self.0) };
    }
}

/// How to reach a cluster.
#[derive(Clone, Debug, Default)]
pub struct Connect<'a> {
    /// The ceph.conf to read; `None`: librados's default search ($CEPH_CONF, /etc/ceph/...).
    pub conf: Option<&'a Path>,
    /// The client's name, with or without its `client.` prefix; `None`: `client.admin`.
    pub client: Option<&'a str>,
    /// The client's keyring; `None`: what the conf names.
    pub keyring: Option<&'a Path>,
    /// Defaults of the caller's, for settings the conf does not make.
    pub defaults: &'a [(&'a str, &'a str)],
    /// Configuration set after the conf is read: what the conf may not change.
    pub options: &'a [(&'a str, &'a str)],
}

/// A connection to a cluster.
pub struct Cluster {
    h: Arc<ClusterHandle>,
    client: String,
}

impl Cluster {
    /// Connects (blocking: it talks to the monitors, for up to `client_mount_timeout`).
    pub fn connect(c: &Connect<'_>) -> Result<Cluster> {
        let client = match c.client {
            None => "client.admin".to_string(),
            Some(n) if n.starts_with("client.") => n.to_string(),
            Some(n) => format!("client.{n}"),
        };
        let cname = cstring("the client name", client.as_bytes())?;
        let cluster = c"ceph";
        let mut h: sys::rados_t = ptr::null_mut();
        // SAFETY: `h` is an out-pointer to a local; the names are NUL-terminated and outlive
        // the call, which copies them.
        check(|| format!("rados_create2 for {client}"), unsafe {
            sys::rados_create2(&mut h, cluster.as_ptr(), cname.as_ptr(), 0)
        })?;
        // From here on, dropping it shuts the handle down.
        let h = ClusterHandle(h);
        let set = |k: &str, v: &[u8]| -> Result<()> {
            let ck = cstring("a configuration key", k.as_bytes())?;
            let cv = cstring("a configuration value", v)?;
            // SAFETY: a live handle not yet connected; both strings NUL-terminated, copied.
            check(|| format!("cannot set {k}"), unsafe {
                sys::rados_conf_set(h.0, ck.as_ptr(), cv.as_ptr())
            })?;
            Ok(())
        };
        let get = |k: &str| -> Result<String> {
            let ck = cstring("a configuration key", k.as_bytes())?;
            let mut buf = [0 as c_char; 256];
            // SAFETY: a live handle; librados writes a NUL-terminated value of at most
            // `buf.len()` bytes into `buf` (or fails, ENAMETOOLONG).
            check(|| format!("cannot get {k}"), unsafe {
                sys::rados_conf_get(h.0, ck.as_ptr(), buf.as_mut_ptr(), buf.len())
            })?;
            // SAFETY: on success `buf` holds a NUL-terminated string.
            Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned())
        };
        // What the library says before the conf is read: a default the conf leaves alone is
        // replaced by the caller's (values set here would outrank the conf's).
        let before: Vec<String> = c
            .defaults
            .iter()
            .map(|&(k, _)| get(k))
            .collect::<Result<_>>()?;
        let conf = match c.conf {
            Some(p) => Some(cstring("the conf path", p.as_os_str().as_bytes())?),
            None => None,
        };
        let conf_ptr = conf.as_ref().map_or(ptr::null(), |p| p.as_ptr());
        // SAFETY: a live handle not yet connected; the path is NUL-terminated or null (the
        // default search).
        check(
            || match c.conf {
                Some(p) => format!("cannot read {}", p.display()),
                None => "cannot find a ceph.conf".to_string(),
            },
            unsafe { sys::rados_conf_read_file(h.0, conf_ptr) },
        )?;
        for (&(k, v), was) in c.defaults.iter().zip(&before) {
            if get(k)? == *was {
                set(k, v.as_bytes())?;
            }
        }
        if let Some(k) = c.keyring {
            set("keyring", k.as_os_str().as_bytes())?;
        }
        for &(k, v) in c.options {
            set(k, v.as_bytes())?;
        }
        // SAFETY: a live, configured handle.
        check(
            || format!("cannot connect to the cluster as {client}"),
            unsafe { sys::rados_connect(h.0) },
        )?;
        Ok(Cluster {
            h: Arc::new(h),
            client,
        })
    }

    /// The client name it connected as (`client.NAME`).
    pub fn client(&self) -> &str {
        &self.client
    }

    /// This client's address as the cluster knows it: what a blocklist entry names.
    pub fn addrs(&self) -> Result<String> {
        let mut s: *mut c_char = ptr::null_mut();
        // SAFETY: a connected handle; `s` is an out-pointer, set to a string we own and free
        // with rados_buffer_free.
        check(|| "rados_getaddrs".to_string(), unsafe {
            sys::rados_getaddrs(self.h.0, &mut s)
        })?;
        // SAFETY: on success `s` is a NUL-terminated string from librados.
        let a = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        // SAFETY: allocated by librados for us, freed once.
        unsafe { sys::rados_buffer_free(s) };
        Ok(a)
    }

    /// An I/O context on `pool`.
    pub fn pool(&self, pool: &str) -> Result<Pool> {
        let cp = cstring("the pool name", pool.as_bytes())?;
        let mut io: sys::rados_ioctx_t = ptr::null_mut();
        // SAFETY: a connected handle; `io` an out-pointer; the name NUL-terminated.
        check(|| format!("cannot open pool {pool}"), unsafe {
            sys::rados_ioctx_create(self.h.0, cp.as_ptr(), &mut io)
        })?;
        Ok(Pool(Arc::new(PoolHandle {
            io,
            _cluster: self.h.clone(),
        })))
    }
}

struct PoolHandle {
    io: sys::rados_ioctx_t,
    /// The cluster handle outlives its I/O contexts.
    _cluster: Arc<ClusterHandle>,
}

// SAFETY: a rados_ioctx_t may be used from any thread (librados's I/O contexts are thread-safe
// for I/O, and this layer changes none of their settings after creation).
unsafe impl Send for PoolHandle {}
// SAFETY: as for Send.
unsafe impl Sync for PoolHandle {}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        // SAFETY: made by rados_ioctx_create, destroyed once, after every image opened in it
        // (they hold an Arc to this), before the cluster handle (held by this).
        unsafe { sys::rados_ioctx_destroy(self.io) };
    }
}

/// A pool's I/O context.
#[derive(Clone)]
pub struct Pool(Arc<PoolHandle>);

/// Receives an asynchronous operation's result: the caller's tag and the result: `-errno`, or
/// on success the bytes read (fewer than asked where the image ends), the length of a write,
/// and 0 for the others. Called on one of librbd's threads, once per started operation: it
/// must be quick and must not call back into the image.
pub trait Complete: Send + Sync {
    fn complete(&self, tag: u64, result: i64);
}

/// One operation's callback state, owned by librbd between the start and the callback.
struct Pending {
    to: Arc<dyn Complete>,
    tag: u64,
    /// What a success reports, when not librbd's own value: the length of a write (librbd's
    /// value for those is not the same in every release), 0 for the others. `None` for a
    /// read, whose value is the bytes read: fewer than asked where the image ends.
    ok: Option<i64>,
}

unsafe extern "C" fn on_complete(c: sys::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: `arg` is the Box<Pending> that `Image::aio` leaked for this completion; librbd
    // calls this exactly once per completion, so it is taken back exactly once.
    let p = unsafe { Box::from_raw(arg.cast::<Pending>()) };
    // SAFETY: `c` is this callback's completion, valid until released just below.
    let r = unsafe { sys::rbd_aio_get_return_value(c) };
    // SAFETY: released once, after its value was read; nothing else holds it.
    unsafe { sys::rbd_aio_release(c) };
    p.to.complete(
        p.tag,
        if r < 0 {
            r as i64
        } else {
            p.ok.unwrap_or(r as i64)
        },
    );
}

/// An open image.
pub struct Image {
    h: sys::rbd_image_t,
    name: String,
    read_only: bool,
    /// The update watches registered on it, unregistered before it closes.
    watches: Mutex<Vec<Watch>>,
    /// The pool's I/O context outlives its images.
    _pool: Arc<PoolHandle>,
}

/// What an update watch calls: on one of librbd's threads, so it must not block on librbd.
type OnUpdate = Box<dyn Fn() + Send + Sync>;

/// One `rbd_update_watch` registration and the closure its callback calls.
struct Watch {
    handle: u64,
    f: *mut OnUpdate,
}

// SAFETY: `f` points to a Send + Sync closure, owned by the registration.
unsafe impl Send for Watch {}

extern "C" fn on_update(arg: *mut c_void) {
    // SAFETY: `arg` is the `f` of a registration, which stays allocated until its
    // rbd_update_unwatch has returned, and that waits for a callback in flight.
    let f = unsafe { &*arg.cast::<OnUpdate>() };
    // A panic must not unwind into librbd.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        std::process::abort();
    }
}

// SAFETY: librbd's image handles are thread-safe: their I/O calls, size queries and lock calls
// take the image's own locks, and completions run on librbd's threads.
unsafe impl Send for Image {}
// SAFETY: as for Send.
unsafe impl Sync for Image {}

impl Drop for Image {
    fn drop(&mut self) {
        let watches = std::mem::take(
            self.watches
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for w in watches {
            // SAFETY: an open image and a handle it registered, unregistered once. librbd
            // waits for a callback of the handle in flight before it returns, and calls no
            // more after: the closure can go.
            unsafe {
                sys::rbd_update_unwatch(self.h, w.handle);
                drop(Box::from_raw(w.f));
            }
        }
        // SAFETY: opened by rbd_open*, closed once. rbd_close waits for the image's in-flight
        // operations, whose callbacks therefore all ran before it returns.
        unsafe { sys::rbd_close(self.h) };
    }
}

/// The exclusive lock mode of librbd's lock calls, as the type bindgen gave it.
const EXCLUSIVE: sys::rbd_lock_mode_t = sys::rbd_lock_mode_t_RBD_LOCK_MODE_EXCLUSIVE;

impl Image {
    /// Opens `name` in `pool`, read-write or read-only.
    pub fn open(pool: &Pool, name: &str, read_only: bool) -> Result<Image> {
        let cn = cstring("the image name", name.as_bytes())?;
        let mut h: sys::rbd_image_t = ptr::null_mut();
        // SAFETY: a live I/O context; `h` an out-pointer; the name NUL-terminated; no snapshot
        // (null).
        let r = unsafe {
            if read_only {
                sys::rbd_open_read_only(pool.0.io, cn.as_ptr(), &mut h, ptr::null())
            } else {
                sys::rbd_open(pool.0.io, cn.as_ptr(), &mut h, ptr::null())
            }
        };
        check(|| format!("cannot open image {name}"), r)?;
        Ok(Image {
            h,
            name: name.to_string(),
            read_only,
            watches: Mutex::new(Vec::new()),
            _pool: pool.0.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The image's size in bytes, as of now (a resize changes it).
    pub fn size(&self) -> Result<u64> {
        let mut s = 0u64;
        // SAFETY: an open image; `s` an out-pointer to a local.
        check(|| format!("cannot get the size of {}", self.name), unsafe {
            sys::rbd_get_size(self.h, &mut s)
        })?;
        Ok(s)
    }

    /// Has `f` called whenever the image's header changes (a resize, a lock taken or given up,
    /// a snapshot), until the image closes. `f` runs on one of librbd's threads and must not
    /// call librbd there (ask [`Image::size`] elsewhere), nor drop this image (its close would
    /// wait for `f` itself): it should only tell a thread of the caller's.
    pub fn watch_updates(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let f: *mut OnUpdate = Box::into_raw(Box::new(Box::new(f)));
        let mut handle = 0u64;
        // SAFETY: an open image; `handle` an out-pointer to a local; `f` stays allocated until
        // the registration is undone (Drop), which waits for callbacks in flight.
        let r = unsafe { sys::rbd_update_watch(self.h, &mut handle, Some(on_update), f.cast()) };
        if r < 0 {
            // SAFETY: not registered, so no callback has it.
            drop(unsafe { Box::from_raw(f) });
        }
        check(|| format!("cannot watch {} for updates", self.name), r)?;
        self.watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Watch { handle, f });
        Ok(())
    }

    /// The image's feature bits (`RBD_FEATURE_*`).
    pub fn features(&self) -> Result<u64> {
        let mut f = 0u64;
        // SAFETY: an open image; `f` an out-pointer to a local.
        check(
            || format!("cannot get the features of {}", self.name),
            unsafe { sys::rbd_get_features(self.h, &mut f) },
        )?;
        Ok(f)
    }

    /// The value of configuration option `name` as this image applies it: the client's, or
    /// the pool's or the image's own (`rbd config pool|image set`), which override it.
    pub fn config(&self, name: &str) -> Result<Option<String>> {
        let mut max: c_int = 64;
        loop {
            let mut v: Vec<sys::rbd_config_option_t> = Vec::with_capacity(max as usize);
            let mut n = max;
            // SAFETY: an open image; `v` has room for `n` entries, which librbd fills (with
            // strings it allocates) and counts in `n`.
            let r = unsafe { sys::rbd_config_image_list(self.h, v.as_mut_ptr(), &mut n) };
            if r == -libc::ERANGE && n > max {
                max = n;
                continue;
            }
            check(
                || format!("cannot list the configuration of {}", self.name),
                r,
            )?;
            let n = n.clamp(0, max);
            // SAFETY: librbd initialised the first `n` entries.
            unsafe { v.set_len(n as usize) };
            let found = v.iter().find_map(|o| {
                // SAFETY: each entry's name and value are NUL-terminated strings from librbd.
                let (k, val) = unsafe { (CStr::from_ptr(o.name), CStr::from_ptr(o.value)) };
                (k.to_bytes() == name.as_bytes()).then(|| val.to_string_lossy().into_owned())
            });
            // SAFETY: frees the `n` entries' strings, once; the Vec then drops plain data.
            unsafe { sys::rbd_config_image_list_cleanup(v.as_mut_ptr(), n) };
            return Ok(found);
        }
    }

    /// Makes every completed write durable (blocking).
    pub fn flush(&self) -> Result<()> {
        // SAFETY: an open image.
        check(|| format!("cannot flush {}", self.name), unsafe {
            sys::rbd_flush(self.h)
        })?;
        Ok(())
    }

    /// Takes the exclusive lock in exclusive mode: librbd then keeps it, and does not hand it
    /// to another client that asks. Fails (EROFS, EBUSY) while another client holds it.
    /// Blocking: it talks to the OSDs.
    pub fn lock_exclusive(&self) -> Result<()> {
        // SAFETY: an open image.
        check(
            || format!("cannot take the exclusive lock of {}", self.name),
            unsafe { sys::rbd_lock_acquire(self.h, EXCLUSIVE) },
        )?;
        Ok(())
    }

    /// Whether this client holds the exclusive lock now.
    pub fn is_lock_owner(&self) -> Result<bool> {
        let mut owner: c_int = 0;
        // SAFETY: an open image; `owner` an out-pointer to a local.
        check(
            || format!("cannot ask for the lock owner of {}", self.name),
            unsafe { sys::rbd_is_exclusive_lock_owner(self.h, &mut owner) },
        )?;
        Ok(owner != 0)
    }

    /// The clients holding the lock (empty: none), as librbd names them.
    pub fn lock_owners(&self) -> Result<Vec<String>> {
        let mut mode: sys::rbd_lock_mode_t = EXCLUSIVE;
        let mut owners: [*mut c_char; 8] = [ptr::null_mut(); 8];
        let mut n: usize = owners.len();
        // SAFETY: an open image; `owners` has room for `n` pointers, which librbd fills with
        // strings it allocates, and sets `n` to how many.
        let r = unsafe { sys::rbd_lock_get_owners(self.h, &mut mode, owners.as_mut_ptr(), &mut n) };
        if r == -libc::ENOENT {
            return Ok(Vec::new());
        }
        check(
            || format!("cannot list the lock owners of {}", self.name),
            r,
        )?;
        let n = n.min(owners.len());
        let out = owners[..n]
            .iter()
            // SAFETY: librbd set the first `n` entries to NUL-terminated strings.
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect();
        // SAFETY: frees exactly the `n` strings librbd allocated, once.
        unsafe { sys::rbd_lock_get_owners_cleanup(owners.as_mut_ptr(), n) };
        Ok(out)
    }

    /// Breaks `owner`'s exclusive lock. librbd blocklists that client first (its default,
    /// `rbd_blocklist_on_break_lock`), so that no write of its can land afterwards.
    pub fn break_lock(&self, owner: &str) -> Result<()> {
        let co = cstring("the lock owner", owner.as_bytes())?;
        // SAFETY: an open image; the owner NUL-terminated.
        check(
            || format!("cannot break {owner}'s lock on {}", self.name),
            unsafe { sys::rbd_lock_break(self.h, EXCLUSIVE, co.as_ptr()) },
        )?;
        Ok(())
    }

    /// Starts one asynchronous operation, its result going to `to` with `tag`.
    fn aio(
        &self,
        what: &str,
        to: &Arc<dyn Complete>,
        tag: u64,
        ok: Option<usize>,
        start: impl FnOnce(sys::rbd_completion_t) -> c_int,
    ) -> Result<()> {
        let p = Box::into_raw(Box::new(Pending {
            to: to.clone(),
            tag,
            ok: ok.map(|n| n as i64),
        }));
        let mut c: sys::rbd_completion_t = ptr::null_mut();
        // SAFETY: `p` stays allocated until the callback takes it back (or until it is taken
        // back below, when no callback can come); `c` an out-pointer to a local.
        let r = unsafe { sys::rbd_aio_create_completion(p.cast(), Some(on_complete), &mut c) };
        if r < 0 {
            // SAFETY: no completion exists, so no callback will take `p`.
            drop(unsafe { Box::from_raw(p) });
            return Err(Error::new(format!("{what}: cannot make a completion"), -r));
        }
        let r = start(c);
        if r < 0 {
            // librbd (16.2) reports every error of these calls through the completion and
            // returns 0; should one ever return an error after taking the completion, its
            // callback could still come. `c` and `p` are therefore left to it, not freed here:
            // a leak at worst, never a double free. The caller must not count the operation
            // as in flight.
            return Err(Error::new(format!("{what} on {}", self.name), -r));
        }
        Ok(())
    }

    /// Reads `len` bytes at `off` into `buf`.
    ///
    /// # Safety
    ///
    /// `buf` is valid for writes of `len` bytes, and neither read nor written by the program,
    /// until `to` has been called with `tag`.
    pub unsafe fn aio_read(
        &self,
        off: u64,
        len: usize,
        buf: *mut u8,
        to: &Arc<dyn Complete>,
        tag: u64,
    ) -> Result<()> {
        // SAFETY: an open image; `buf` is valid as the caller promises; `c` is a fresh
        // completion.
        self.aio("read", to, tag, None, |c| unsafe {
            sys::rbd_aio_read(self.h, off, len, buf.cast(), c)
        })
    }

    /// Writes `len` bytes of `buf` at `off`.
    ///
    /// # Safety
    ///
    /// `buf` is valid for reads of `len` bytes, and not written by the program, until `to`
    /// has been called with `tag`.
    pub unsafe fn aio_write(
        &self,
        off: u64,
        len: usize,
        buf: *const u8,
        to: &Arc<dyn Complete>,
        tag: u64,
    ) -> Result<()> {
        // SAFETY: as for aio_read, with `buf` only read.
        self.aio("write", to, tag, Some(len), |c| unsafe {
            sys::rbd_aio_write(self.h, off, len, buf.cast(), c)
        })
    }

    /// Makes every write completed so far durable.
    pub fn aio_flush(&self, to: &Arc<dyn Complete>, tag: u64) -> Result<()> {
        // SAFETY: an open image and a fresh completion.
        self.aio("flush", to, tag, Some(0), |c| unsafe {
            sys::rbd_aio_flush(self.h, c)
        })
    }

    /// Deallocates `len` bytes at `off`; they read back as zeroes.
    pub fn aio_discard(&self, off: u64, len: u64, to: &Arc<dyn Complete>, tag: u64) -> Result<()> {
        // SAFETY: an open image and a fresh completion.
        self.aio("discard", to, tag, Some(0), |c| unsafe {
            sys::rbd_aio_discard(self.h, off, len, c)
        })
    }

    /// Zeroes `len` bytes at `off`.
    pub fn aio_write_zeroes(
        &self,
        off: u64,
        len: u64,
        to: &Arc<dyn Complete>,
        tag: u64,
    ) -> Result<()> {
        // SAFETY: an open image and a fresh completion; no zero or op flags.
        self.aio("write-zeroes", to, tag, Some(0), |c| unsafe {
            sys::rbd_aio_write_zeroes(self.h, off, len as usize, c, 0, 0)
        })
    }
}
