//! The counting global allocator of the zero-allocation tests: it forwards every call to
//! the system allocator and, while armed, counts allocations (and reallocations) made on
//! the threads a test chose: the ones that called [`count_this_thread`], or whose name
//! starts with the prefix given to [`count_threads_named`] (worker threads the code under
//! test spawns itself). A test binary installs it with
//! `#[global_allocator] static GLOBAL: CountingAllocator = CountingAllocator;`.
//!
//! Counting never allocates: the bookkeeping is atomics and a const-initialised
//! thread-local `Cell`.
#![allow(unsafe_code)] // a GlobalAlloc impl is unsafe by definition; see its SAFETY

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// See the module documentation.
#[derive(Debug)]
pub struct CountingAllocator;

static ARMED: AtomicBool = AtomicBool::new(false);
static COUNTED: AtomicU64 = AtomicU64::new(0);
static NAME_PREFIX: OnceLock<&'static str> = OnceLock::new();

/// Whether this thread's allocations are counted; decided at its first allocation while
/// armed, unless [`count_this_thread`] said so first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Unknown,
    /// Reading the thread's name, which may itself allocate: that nested call is not
    /// counted and does not recurse.
    Asking,
    Counted,
    Other,
}

thread_local! {
    static ROLE: Cell<Role> = const { Cell::new(Role::Unknown) };
}

/// Counts the calling thread's allocations while armed.
pub fn count_this_thread() {
    ROLE.with(|r| r.set(Role::Counted));
}

/// Counts, while armed, the allocations of every thread whose name starts with `prefix`
/// (set once per test binary).
pub fn count_threads_named(prefix: &'static str) {
    let _ = NAME_PREFIX.set(prefix);
}

/// Starts counting (from zero).
pub fn arm() {
    COUNTED.store(0, Ordering::SeqCst);
    ARMED.store(true, Ordering::SeqCst);
}

/// Stops counting; returns how many allocations the chosen threads made since [`arm`].
pub fn disarm() -> u64 {
    ARMED.store(false, Ordering::SeqCst);
    COUNTED.load(Ordering::SeqCst)
}

fn count() {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let role = ROLE.with(|r| {
        if r.get() == Role::Unknown {
            r.set(Role::Asking);
            let named = NAME_PREFIX.get().is_some_and(|prefix| {
                std::thread::current()
                    .name()
                    .is_some_and(|n| n.starts_with(prefix))
            });
            r.set(if named { Role::Counted } else { Role::Other });
        }
        r.get()
    });
    if role == Role::Counted {
        COUNTED.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call unchanged to the system allocator; the bookkeeping uses a
// const-initialised thread-local Cell, a OnceLock read and atomics, none of which
// allocate (a thread's name is read once, with counting off for that nested call).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
