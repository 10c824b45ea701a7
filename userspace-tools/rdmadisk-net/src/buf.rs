//! Page-aligned, zeroed heap buffers for O_DIRECT I/O and RDMA registration.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Memory aligned to a page, zero-initialised, for registered and O_DIRECT buffers.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Alignment of every buffer: a page, which satisfies O_DIRECT on any block size up to 4 KiB.
    pub const ALIGN: usize = 4096;

    /// A zeroed buffer of `len` bytes (at least one byte is allocated).
    pub fn new(len: usize) -> Self {
        let layout =
            Layout::from_size_align(len.max(1), Self::ALIGN).expect("buffer size overflows");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Start address, mutable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes for the buffer's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), Self::ALIGN).expect("checked in new");
        // SAFETY: allocated in `new` with this very layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}
