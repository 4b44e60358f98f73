//! The guest's allocator: a bump arena inside the instance's initial memory,
//! then dlmalloc (as in std) on pages from `memory.grow`.
//!
//! The host gives every invocation a fresh instance, so the heap lives for
//! one invocation and starts empty. A bump allocator suits that: taking
//! memory is a pointer increment, and giving it back is free. Two things
//! keep it from wasting much:
//!
//! - the most recent allocation is given back for real, and grows and
//!   shrinks in place (a `String` or `Vec` being built, the JSON writer's
//!   buffer);
//! - the arena is bounded ([`ARENA_BYTES`]): once it is used up, further
//!   allocations go to dlmalloc, which reuses what is freed, so an
//!   invocation that allocates and frees a lot behaves as with std's
//!   allocator, within the host's memory limit.
//!
//! The arena is zeroed `.bss` in the initial memory, so typical invocations
//! never grow memory either: a growth costs the host two `mprotect` calls (to
//! make the pages accessible, and inaccessible again when it reuses the
//! memory slot for the next instance).

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

#[repr(C, align(16))]
struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));

/// dlmalloc's source of segments once the arena is used up: `memory.grow`.
struct GrowMemory;

// SAFETY: every segment returned is fresh pages `memory.grow` just added.
unsafe impl Allocator for GrowMemory {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
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
        let len = if start.wrapping_add(len) == 0 {
            len - 16
        } else {
            len
        };
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
        // Grown pages are zero.
        true
    }

    fn page_size(&self) -> usize {
        WASM_PAGE_BYTES
    }
}

struct GuestHeap {
    /// Offset of the arena's first free byte; everything below it is handed
    /// out (or lost to alignment, or freed but not on top).
    top: UnsafeCell<usize>,
    overflow: UnsafeCell<Dlmalloc<GrowMemory>>,
}

// SAFETY: wasm32 without the atomics feature has a single thread.
unsafe impl Sync for Arena {}
unsafe impl Sync for GuestHeap {}
unsafe impl Send for GrowMemory {}

#[global_allocator]
static HEAP: GuestHeap = GuestHeap {
    top: UnsafeCell::new(0),
    overflow: UnsafeCell::new(Dlmalloc::new_with_allocator(GrowMemory)),
};

fn arena_start() -> usize {
    ARENA.0.get() as usize
}

impl GuestHeap {
    /// SAFETY (for both accessors): callers must not hold the returned
    /// reference across another call; the allocator is never reentered on
    /// one thread.
    #[allow(clippy::mut_from_ref)]
    unsafe fn top(&self) -> &mut usize {
        unsafe { &mut *self.top.get() }
    }

    #[allow(clippy::mut_from_ref)]
    unsafe fn overflow(&self) -> &mut Dlmalloc<GrowMemory> {
        unsafe { &mut *self.overflow.get() }
    }

    /// The arena's block for `layout`, or `None` when it has no room left.
    unsafe fn bump(&self, layout: Layout) -> Option<*mut u8> {
        let top = unsafe { self.top() };
        let start = (arena_start() + *top).checked_next_multiple_of(layout.align())?;
        let end = start.checked_add(layout.size())?;
        if end > arena_start() + ARENA_BYTES {
            return None;
        }
        *top = end - arena_start();
        Some(start as *mut u8)
    }

    fn in_arena(ptr: *mut u8) -> bool {
        (arena_start()..arena_start() + ARENA_BYTES).contains(&(ptr as usize))
    }

    /// Whether the block at `ptr` of `size` bytes is the arena's last.
    unsafe fn on_top(&self, ptr: *mut u8, size: usize) -> bool {
        ptr as usize + size == arena_start() + unsafe { *self.top() }
    }
}

// SAFETY: arena blocks never overlap (each starts at or above the top, which
// only moves down past a block that was given back); the rest is dlmalloc,
// which upholds `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for GuestHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match unsafe { self.bump(layout) } {
            Some(block) => block,
            None => unsafe { self.overflow().malloc(layout.size(), layout.align()) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match unsafe { self.bump(layout) } {
            Some(block) => {
                // A block given back and taken again is not zero any more.
                unsafe { block.write_bytes(0, layout.size()) };
                block
            }
            None => unsafe { self.overflow().calloc(layout.size(), layout.align()) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !Self::in_arena(ptr) {
            return unsafe { self.overflow().free(ptr, layout.size(), layout.align()) };
        }
        if unsafe { self.on_top(ptr, layout.size()) } {
            unsafe { *self.top() = ptr as usize - arena_start() };
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !Self::in_arena(ptr) {
            return unsafe {
                self.overflow()
                    .realloc(ptr, layout.size(), layout.align(), new_size)
            };
        }
        let fits_in_place = ptr as usize + new_size <= arena_start() + ARENA_BYTES;
        if unsafe { self.on_top(ptr, layout.size()) } && fits_in_place {
            unsafe { *self.top() = ptr as usize + new_size - arena_start() };
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `GlobalAlloc::realloc` requires a valid layout for the new size.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            unsafe {
                ptr::copy_nonoverlapping(ptr, moved, layout.size());
                self.dealloc(ptr, layout);
            }
        }
        moved
    }
}
