//! The guest's allocator: dlmalloc, as in std, fed first from a region that
//! is part of the instance's initial memory.
//!
//! std's wasm allocator takes every segment with `memory.grow`, so each
//! invocation of a fresh instance grows its memory at least once. The host
//! then has to make the new pages accessible and, when it reuses the memory
//! slot for the next instance, inaccessible again: two `mprotect` calls and a
//! TLB shootdown per invocation. Serving the first segment from a static
//! arena (zeroed `.bss`, inside the initial memory) keeps typical invocations
//! from ever growing memory; larger ones still grow as before, and the host's
//! memory limit bounds them the same way.

#![cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;

use dlmalloc::{Allocator, Dlmalloc};

/// WebAssembly's page size: the unit of `memory.grow`.
const WASM_PAGE_BYTES: usize = 64 << 10;

/// Size of the arena. Default: 256 KiB — dozens of times what the demo skills
/// allocate in one invocation, and small, since the host scans the whole
/// initial memory for dirty pages after each instance.
const ARENA_BYTES: usize = 256 << 10;

/// The arena: 64 KiB-aligned like the pages dlmalloc gets from `memory.grow`.
#[repr(C, align(65536))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));

/// dlmalloc's source of segments: the arena once, then `memory.grow`.
struct ArenaFirst {
    arena_taken: UnsafeCell<bool>,
}

// SAFETY: wasm32 without the atomics feature has a single thread.
unsafe impl Sync for Arena {}
unsafe impl Send for ArenaFirst {}

// SAFETY: every segment returned is memory no one else uses: the arena is
// handed out at most once, and `memory.grow` adds fresh pages for the rest.
unsafe impl Allocator for ArenaFirst {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        // SAFETY: single-threaded (see above), and not reentrant.
        let taken = unsafe { &mut *self.arena_taken.get() };
        if !*taken && size <= ARENA_BYTES {
            *taken = true;
            return (ARENA.0.get().cast(), ARENA_BYTES, 0);
        }
        // As dlmalloc's own wasm source does it.
        let pages = size.div_ceil(WASM_PAGE_BYTES);
        let previous = core::arch::wasm32::memory_grow(0, pages);
        if previous == usize::MAX {
            return (ptr::null_mut(), 0, 0);
        }
        let start = previous * WASM_PAGE_BYTES;
        let len = pages * WASM_PAGE_BYTES;
        // A segment ending at the top of the 4 GiB address space would make a
        // pointer wrap to 0: keep its last bytes out of the heap.
        let len = if start.wrapping_add(len) == 0 { len - 16 } else { len };
        (start as *mut u8, len, 0)
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        ptr::null_mut()
    }

    fn free_part(&self, _ptr: *mut u8, _old: usize, _new: usize) -> bool {
        false
    }

    fn free(&self, _ptr: *mut u8, _size: usize) -> bool {
        false
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        false
    }

    fn allocates_zeros(&self) -> bool {
        // A fresh instance's `.bss` and grown pages are both zero.
        true
    }

    fn page_size(&self) -> usize {
        WASM_PAGE_BYTES
    }
}

struct GuestHeap(UnsafeCell<Dlmalloc<ArenaFirst>>);

// SAFETY: single-threaded (see above).
unsafe impl Sync for GuestHeap {}

#[global_allocator]
static HEAP: GuestHeap = GuestHeap(UnsafeCell::new(Dlmalloc::new_with_allocator(ArenaFirst {
    arena_taken: UnsafeCell::new(false),
})));

impl GuestHeap {
    /// SAFETY: callers must not hold the returned reference across another
    /// call; the allocator is never reentered on one thread.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get(&self) -> &mut Dlmalloc<ArenaFirst> {
        unsafe { &mut *self.0.get() }
    }
}

// SAFETY: delegates to dlmalloc, which upholds `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for GuestHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { self.get().malloc(layout.size(), layout.align()) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { self.get().calloc(layout.size(), layout.align()) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { self.get().free(ptr, layout.size(), layout.align()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe {
            self.get()
                .realloc(ptr, layout.size(), layout.align(), new_size)
        }
    }
}
