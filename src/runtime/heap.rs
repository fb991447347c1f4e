//! The allocator of the static musl builds: dlmalloc behind one lock, with small freed blocks
//! kept in a few sharded caches in front of it.
//!
//! musl's own malloc serialises every call on one lock with heavy bookkeeping; dlmalloc (a
//! pure-Rust port of Doug Lea's allocator) is several times cheaper per call but also has one
//! lock. With edgekcm's allocation churn (decoding JSON makes and drops a small block for
//! every string and map node) the threads spent most of their time on that lock: in the
//! endpoints workload against the sandbox, half of all samples were the lock's spinning,
//! waking and handing over.
//!
//! Here each thread is tied to one of `SHARDS` caches. A block of up to `MAX_SMALL` bytes is
//! taken from, and given back to, its thread's cache when that cache is free at once (it is
//! never waited for); only what the caches cannot serve goes to dlmalloc. An empty class of a
//! cache fills from the depot, magazines of blocks other caches handed on, or else with a
//! batch from dlmalloc; a class past `BLOCKS_PER_CLASS` blocks, or a cache past
//! `BYTES_PER_SHARD`, hands half the blocks of that class (of its fullest class) to the
//! depot, which keeps up to `DEPOT_BYTES` and gives the rest to dlmalloc. So the memory held
//! for reuse is bounded (2 MiB in all) however many threads come and go, and nothing needs a
//! thread-exit hook; `Heap::release` hands all of it back when the process goes idle.
//!
//! Small blocks are handed out by size class: a request is rounded up to its class's size,
//! which is exactly what a dlmalloc chunk of that class holds (16-byte steps plus the chunk's
//! 8-byte overhead), so rounding costs no memory. A block keeps its class for its whole
//! life: freed or reallocated, its layout names the class it came from.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::{Cell, UnsafeCell};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The largest request served by size class.
pub const MAX_SMALL: usize = 1016;
/// Alignment of every block: dlmalloc aligns its chunks to two words, 16 bytes on 64-bit
/// targets (small layouts asking for more go to dlmalloc directly).
const ALIGN: usize = 2 * std::mem::size_of::<usize>();
const STEP: usize = 16;
/// Size of the smallest class: a minimum dlmalloc chunk's room.
const MIN_CLASS: usize = 24;
const CLASSES: usize = (MAX_SMALL - MIN_CLASS) / STEP + 1;
/// Caches; threads are spread over them in the order they first allocate.
pub const SHARDS: usize = 16;
/// Blocks a class of a cache holds before it hands half of them to the depot.
const BLOCKS_PER_CLASS: u32 = 64;
/// Bytes a cache holds before it hands blocks of its fullest class to the depot.
const BYTES_PER_SHARD: usize = 64 * 1024;
/// Blocks an empty class takes from dlmalloc at once.
const REFILL: usize = 16;
/// Bytes the depot holds before what comes to it goes back to dlmalloc.
const DEPOT_BYTES: usize = 1024 * 1024;

/// The size class of a request of `size` bytes (`size <= MAX_SMALL`).
pub const fn class_of(size: usize) -> usize {
    if size <= MIN_CLASS {
        0
    } else {
        (size - MIN_CLASS).div_ceil(STEP)
    }
}

/// The bytes a block of class `c` holds.
pub const fn class_size(c: usize) -> usize {
    MIN_CLASS + c * STEP
}

/// Whether a layout is served by size class (else by dlmalloc directly).
fn small(layout: Layout) -> bool {
    layout.size() <= MAX_SMALL && layout.align() <= ALIGN
}

/// A freed block. Its first word links the next block of its class; the first block of a
/// magazine (a list handed to the depot) also links the next magazine and counts its blocks.
/// Every class has room for the three words.
struct Free {
    next: *mut Free,
    next_magazine: *mut Free,
    count: usize,
}

/// Free blocks of one class: a list and its length.
#[derive(Clone, Copy)]
struct Bin {
    head: *mut Free,
    len: u32,
}

const EMPTY_BIN: Bin = Bin {
    head: ptr::null_mut(),
    len: 0,
};

/// One cache: free blocks by class, and the bytes they hold.
struct Blocks {
    bins: [Bin; CLASSES],
    bytes: usize,
}

impl Blocks {
    /// Keep a free block of class `c`.
    ///
    /// # Safety
    /// `p` is a block of class `c` that nothing uses any more.
    unsafe fn push(&mut self, p: *mut u8, c: usize) {
        let block = p.cast::<Free>();
        // SAFETY: every class has room for a `Free` at its (16-byte aligned) start; only the
        // link is written here (`detach` and the depot write the other two words).
        unsafe { ptr::addr_of_mut!((*block).next).write(self.bins[c].head) };
        self.bins[c].head = block;
        self.bins[c].len += 1;
        self.bytes += class_size(c);
    }

    /// A kept block of class `c`, null if there is none.
    fn pop(&mut self, c: usize) -> *mut u8 {
        let block = self.bins[c].head;
        if !block.is_null() {
            // SAFETY: a kept block's first word is the link `push` wrote.
            self.bins[c].head = unsafe { (*block).next };
            self.bins[c].len -= 1;
            self.bytes -= class_size(c);
        }
        block.cast()
    }

    /// Take `n` (at least 1, at most all) of the blocks of class `c` as a magazine.
    fn detach(&mut self, c: usize, n: u32) -> *mut Free {
        let first = self.bins[c].head;
        let mut last = first;
        for _ in 1..n {
            // SAFETY: the class holds at least `n` linked blocks.
            last = unsafe { (*last).next };
        }
        // SAFETY: as above; `first` and `last` are kept blocks.
        unsafe {
            self.bins[c].head = (*last).next;
            (*last).next = ptr::null_mut();
            (*first).count = n as usize;
        }
        self.bins[c].len -= n;
        self.bytes -= n as usize * class_size(c);
        first
    }

    /// Make a magazine this cache's blocks of class `c`, which has none.
    ///
    /// # Safety
    /// `first` heads a magazine of class `c` made by `detach`.
    unsafe fn attach(&mut self, c: usize, first: *mut Free) {
        // SAFETY: the magazine's first block counts its blocks.
        let n = unsafe { (*first).count };
        self.bins[c] = Bin {
            head: first,
            len: n as u32,
        };
        self.bytes += n * class_size(c);
    }

    /// The class holding the most bytes, when any holds blocks.
    fn fullest(&self) -> Option<usize> {
        (0..CLASSES)
            .filter(|&k| self.bins[k].len > 0)
            .max_by_key(|&k| self.bins[k].len as usize * class_size(k))
    }
}

/// A cache one thread at a time may use.
struct Shard {
    busy: AtomicBool,
    cell: UnsafeCell<Blocks>,
}

impl Shard {
    const fn new() -> Shard {
        Shard {
            busy: AtomicBool::new(false),
            cell: UnsafeCell::new(Blocks {
                bins: [EMPTY_BIN; CLASSES],
                bytes: 0,
            }),
        }
    }

    /// The cache if no other thread holds it right now; never waits.
    fn try_take(&self) -> Option<ShardGuard<'_>> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| ShardGuard(self))
    }
}

struct ShardGuard<'a>(&'a Shard);

impl ShardGuard<'_> {
    fn blocks(&mut self) -> &mut Blocks {
        // SAFETY: `busy` was set by this guard, so no other reference to the blocks exists
        // until it is dropped.
        unsafe { &mut *self.0.cell.get() }
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

// SAFETY: the blocks behind `cell` are only reached through a `ShardGuard`, which `busy`
// makes exclusive; the memory they link is owned by the allocator, not by any thread.
unsafe impl Sync for Shard {}
// SAFETY: as above.
unsafe impl Send for Shard {}

/// Magazines of free blocks, per class (a bin's list links magazines; its length counts
/// blocks): what one thread frees in bulk another takes in bulk, without dlmalloc.
struct Depot {
    magazines: [Bin; CLASSES],
    bytes: usize,
}

// SAFETY: the linked blocks are owned by the allocator; the depot is only reached under its
// mutex.
unsafe impl Send for Depot {}

struct Arena(dlmalloc::Dlmalloc);

// SAFETY: dlmalloc's state holds raw pointers into memory it mapped itself; it is only ever
// used with the mutex held, from whichever thread holds it.
unsafe impl Send for Arena {}

/// dlmalloc behind std's futex mutex (one atomic each way when uncontended; dlmalloc's own
/// global wrapper would take a pthread mutex, on musl a general one checking type, robustness
/// and owner on each call), with the caches and the depot in front of it.
pub struct Heap {
    arena: Mutex<Arena>,
    depot: Mutex<Depot>,
    shards: [Shard; SHARDS],
    next_slot: AtomicUsize,
}

impl Default for Heap {
    fn default() -> Self {
        Heap::new()
    }
}

thread_local! {
    /// This thread's cache, plus one; 0 until its first small allocation. No destructor, so
    /// it can be read at any point of a thread's life, its exit included.
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// The allocator of the static musl builds (`src/main.rs` makes `Global` the global
/// allocator).
pub static HEAP: Heap = Heap::new();

/// `HEAP` as a `GlobalAlloc`.
pub struct Global;

// SAFETY: forwards every call to `HEAP` with the same arguments.
unsafe impl GlobalAlloc for Global {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { HEAP.alloc(layout) }
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { HEAP.dealloc(p, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { HEAP.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { HEAP.realloc(p, layout, new_size) }
    }
}

impl Heap {
    pub const fn new() -> Heap {
        Heap {
            arena: Mutex::new(Arena(dlmalloc::Dlmalloc::new())),
            depot: Mutex::new(Depot {
                magazines: [EMPTY_BIN; CLASSES],
                bytes: 0,
            }),
            shards: [const { Shard::new() }; SHARDS],
            next_slot: AtomicUsize::new(0),
        }
    }

    fn arena(&self) -> MutexGuard<'_, Arena> {
        // Nothing in dlmalloc panics while the lock is held; if something ever did, its state
        // is as consistent as dlmalloc leaves it, so poisoning is not a reason to stop.
        self.arena.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn depot(&self) -> MutexGuard<'_, Depot> {
        self.depot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This thread's cache, taken if free.
    fn shard(&self) -> Option<ShardGuard<'_>> {
        let slot = SLOT
            .try_with(|s| {
                if s.get() == 0 {
                    s.set(self.next_slot.fetch_add(1, Ordering::Relaxed) % SHARDS + 1);
                }
                s.get() - 1
            })
            .ok()?;
        self.shards[slot].try_take()
    }

    /// A block of class `c`: from this thread's cache, which fills an empty class with a
    /// magazine from the depot or else a batch from dlmalloc; from dlmalloc alone when the
    /// cache is held by another thread.
    unsafe fn alloc_small(&self, size: usize) -> *mut u8 {
        let c = class_of(size);
        let size = class_size(c);
        let Some(mut g) = self.shard() else {
            // SAFETY: a non-zero size and dlmalloc's natural alignment.
            return unsafe { self.arena().0.malloc(size, ALIGN) };
        };
        let b = g.blocks();
        if b.bins[c].head.is_null() {
            if let Some(first) = self.take_magazine(c) {
                // SAFETY: a magazine of class `c` from the depot.
                unsafe { b.attach(c, first) };
            } else {
                let room = (BYTES_PER_SHARD.saturating_sub(b.bytes) / size).min(REFILL);
                let mut arena = self.arena();
                for _ in 1..room {
                    // SAFETY: as above.
                    let p = unsafe { arena.0.malloc(size, ALIGN) };
                    if p.is_null() {
                        break;
                    }
                    // SAFETY: a new block of class `c`.
                    unsafe { b.push(p, c) };
                }
                // SAFETY: as above.
                return unsafe { arena.0.malloc(size, ALIGN) };
            }
        }
        b.pop(c)
    }

    /// Give back a block of class `c` to this thread's cache (to dlmalloc when another
    /// thread holds it). A class past `BLOCKS_PER_CLASS` then hands half its blocks to the
    /// depot, and so does the fullest class while the cache is past `BYTES_PER_SHARD`.
    unsafe fn free_small(&self, p: *mut u8, size: usize) {
        let c = class_of(size);
        let size = class_size(c);
        let Some(mut g) = self.shard() else {
            // SAFETY: `p` came from dlmalloc with exactly this size and alignment.
            return unsafe { self.arena().0.free(p, size, ALIGN) };
        };
        let b = g.blocks();
        // SAFETY: the caller gives up `p`, a block of class `c`.
        unsafe { b.push(p, c) };
        if b.bins[c].len > BLOCKS_PER_CLASS {
            let first = b.detach(c, b.bins[c].len / 2);
            // SAFETY: a magazine of class `c` just detached.
            unsafe { self.give_magazine(c, first) };
        }
        while b.bytes > BYTES_PER_SHARD {
            let Some(k) = b.fullest() else { break };
            let first = b.detach(k, b.bins[k].len.div_ceil(2));
            // SAFETY: a magazine of class `k` just detached.
            unsafe { self.give_magazine(k, first) };
        }
    }

    /// A magazine of class `c` from the depot.
    fn take_magazine(&self, c: usize) -> Option<*mut Free> {
        let mut d = self.depot();
        let first = d.magazines[c].head;
        if first.is_null() {
            return None;
        }
        // SAFETY: a magazine's first block links the next magazine and counts its blocks.
        let (next, n) = unsafe { ((*first).next_magazine, (*first).count) };
        d.magazines[c].head = next;
        d.magazines[c].len -= n as u32;
        d.bytes -= n * class_size(c);
        Some(first)
    }

    /// Put a magazine of class `c` in the depot, or give its blocks to dlmalloc when the
    /// depot holds its budget.
    ///
    /// # Safety
    /// `first` heads a magazine of unused blocks of class `c` made by `Blocks::detach`.
    unsafe fn give_magazine(&self, c: usize, first: *mut Free) {
        // SAFETY: the magazine's first block counts its blocks.
        let n = unsafe { (*first).count };
        let bytes = n * class_size(c);
        {
            let mut d = self.depot();
            if d.bytes + bytes <= DEPOT_BYTES {
                // SAFETY: the block is unused and has room for the link.
                unsafe { (*first).next_magazine = d.magazines[c].head };
                d.magazines[c].head = first;
                d.magazines[c].len += n as u32;
                d.bytes += bytes;
                return;
            }
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { free_magazine(&mut self.arena(), c, first) };
    }

    /// Hand every cached block back to dlmalloc and let it return what it can to the
    /// system: for a process going idle, so its resident set is not held up by blocks kept
    /// for a load that has passed. A cache held by a thread right now is skipped.
    pub fn release(&self) {
        let mut arena = self.arena();
        for s in &self.shards {
            if let Some(mut g) = s.try_take() {
                let b = g.blocks();
                for c in 0..CLASSES {
                    // SAFETY: a class's blocks are linked by `next`, each unused and from
                    // dlmalloc with its class's size.
                    unsafe { free_magazine(&mut arena, c, b.bins[c].head) };
                    b.bins[c] = EMPTY_BIN;
                }
                b.bytes = 0;
            }
        }
        {
            let mut d = self.depot();
            for c in 0..CLASSES {
                let mut first = d.magazines[c].head;
                while !first.is_null() {
                    // SAFETY: each magazine's first block links the next; the depot's
                    // magazines are unused blocks of class `c`.
                    unsafe {
                        let next_magazine = (*first).next_magazine;
                        free_magazine(&mut arena, c, first);
                        first = next_magazine;
                    }
                }
                d.magazines[c] = EMPTY_BIN;
            }
            d.bytes = 0;
        }
        // SAFETY: trimming only gives back memory dlmalloc holds free.
        unsafe { arena.0.trim(0) };
    }

    /// Blocks in the caches and the depot, and the bytes they hold (for tests).
    pub fn cached(&self) -> (usize, usize) {
        let mut blocks = 0;
        let mut bytes = 0;
        for s in &self.shards {
            // A cache held by another thread right now is waited for: not a hot path.
            let mut g = loop {
                if let Some(g) = s.try_take() {
                    break g;
                }
                std::hint::spin_loop();
            };
            let b = g.blocks();
            blocks += b.bins.iter().map(|b| b.len as usize).sum::<usize>();
            bytes += b.bytes;
        }
        let d = self.depot();
        blocks += d.magazines.iter().map(|m| m.len as usize).sum::<usize>();
        bytes += d.bytes;
        (blocks, bytes)
    }
}

/// Give the blocks of a magazine back to dlmalloc.
///
/// # Safety
/// `first` heads a list of unused blocks of class `c` linked by `next`, each from dlmalloc
/// with its class's size.
unsafe fn free_magazine(arena: &mut Arena, c: usize, first: *mut Free) {
    let mut b = first;
    while !b.is_null() {
        // SAFETY: as the caller promises; the link is read before the block is freed.
        unsafe {
            let next = (*b).next;
            arena.0.free(b.cast(), class_size(c), ALIGN);
            b = next;
        }
    }
}

// SAFETY: small layouts are served by class from the caches or from dlmalloc with the class's
// size and natural alignment, and go back the same way (a layout always names the class of
// the block it describes, as `GlobalAlloc` guarantees the layout a block was allocated or
// reallocated with); every other layout is dlmalloc's alone, under its lock.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if small(layout) {
            unsafe { self.alloc_small(layout.size()) }
        } else {
            unsafe { self.arena().0.malloc(layout.size(), layout.align()) }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if small(layout) {
            unsafe { self.free_small(p, layout.size()) }
        } else {
            unsafe { self.arena().0.free(p, layout.size(), layout.align()) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if small(layout) {
            let p = unsafe { self.alloc_small(layout.size()) };
            if !p.is_null() {
                unsafe { ptr::write_bytes(p, 0, layout.size()) };
            }
            p
        } else {
            unsafe { self.arena().0.calloc(layout.size(), layout.align()) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (for the layout below): `GlobalAlloc::realloc` promises a new size that,
        // with the old alignment, makes a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (small(layout), small(new)) {
            (false, false) => unsafe {
                self.arena()
                    .0
                    .realloc(p, layout.size(), layout.align(), new_size)
            },
            // The block already has room: it stays where it is.
            (true, true) if class_of(layout.size()) == class_of(new_size) => p,
            _ => {
                let q = unsafe { self.alloc(new) };
                if !q.is_null() {
                    unsafe {
                        ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
                        self.dealloc(p, layout);
                    }
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn classes_are_dlmalloc_chunk_sizes() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(24), 0);
        assert_eq!(class_of(25), 1);
        assert_eq!(class_size(1), 40);
        assert_eq!(class_of(40), 1);
        assert_eq!(class_of(41), 2);
        assert_eq!(class_of(MAX_SMALL), CLASSES - 1);
        assert_eq!(class_size(CLASSES - 1), MAX_SMALL);
        for size in 1..=MAX_SMALL {
            let c = class_of(size);
            assert!(class_size(c) >= size, "{size}");
            assert!(c == 0 || class_size(c - 1) < size, "{size}");
            // A dlmalloc chunk for the class's size has no room to spare.
            assert_eq!((class_size(c) + 8) % 16, 0);
        }
    }

    unsafe fn fill(p: *mut u8, n: usize, tag: u8) {
        for i in 0..n {
            unsafe { *p.add(i) = tag.wrapping_add(i as u8) };
        }
    }

    unsafe fn check(p: *const u8, n: usize, tag: u8) {
        for i in 0..n {
            assert_eq!(
                unsafe { *p.add(i) },
                tag.wrapping_add(i as u8),
                "byte {i} of {n}"
            );
        }
    }

    #[test]
    fn freed_blocks_are_reused_and_the_caches_stay_bounded() {
        let heap = Heap::new();
        let l = Layout::from_size_align(100, 8).unwrap();
        unsafe {
            let a = heap.alloc(l);
            heap.dealloc(a, l);
            // Same thread, same class: the cached block comes back.
            let b = heap.alloc(Layout::from_size_align(104, 8).unwrap());
            assert_eq!(a, b);
            heap.dealloc(b, Layout::from_size_align(104, 8).unwrap());
            // 5 MB freed in one go: the shard and the depot keep their budgets, dlmalloc
            // gets the rest.
            let big = Layout::from_size_align(1000, 8).unwrap();
            let many: Vec<*mut u8> = (0..5000).map(|_| heap.alloc(big)).collect();
            for &p in &many {
                heap.dealloc(p, big);
            }
            let (blocks, bytes) = heap.cached();
            assert!(bytes <= BYTES_PER_SHARD + DEPOT_BYTES, "{bytes}");
            heap.release();
            assert_eq!(heap.cached(), (0, 0));
            assert!(
                blocks > BLOCKS_PER_CLASS as usize,
                "the depot took magazines: {blocks}"
            );
            // And they serve allocations again.
            let again: Vec<*mut u8> = (0..5000).map(|_| heap.alloc(big)).collect();
            assert!(again.iter().all(|p| !p.is_null()));
            for &p in &again {
                heap.dealloc(p, big);
            }
        }
    }

    #[test]
    fn realloc_keeps_contents_across_classes_and_to_large() {
        let heap = Heap::new();
        unsafe {
            let mut l = Layout::from_size_align(10, 1).unwrap();
            let mut p = heap.alloc(l);
            fill(p, 10, 7);
            for new in [20, 24, 25, 500, 1016, 1017, 5000, 900, 30, 3] {
                let q = heap.realloc(p, l, new);
                assert!(!q.is_null());
                check(q, l.size().min(new), 7);
                fill(q, new, 7);
                p = q;
                l = Layout::from_size_align(new, 1).unwrap();
            }
            heap.dealloc(p, l);
            let z = Layout::from_size_align(200, 8).unwrap();
            let a = heap.alloc(z);
            fill(a, 200, 1);
            heap.dealloc(a, z);
            let b = heap.alloc_zeroed(z);
            assert!(std::slice::from_raw_parts(b, 200).iter().all(|&x| x == 0));
            heap.dealloc(b, z);
            // Over-aligned: dlmalloc's own path.
            let big = Layout::from_size_align(64, 4096).unwrap();
            let c = heap.alloc(big);
            assert_eq!(c as usize % 4096, 0);
            heap.dealloc(c, big);
        }
    }

    /// Threads allocate, write, pass blocks to each other and free them: every block keeps
    /// what was written until its last owner frees it.
    #[test]
    fn blocks_cross_threads_intact() {
        let heap = Arc::new(Heap::new());
        let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, u8)>();
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for t in 0..6u8 {
            let heap = heap.clone();
            let tx = tx.clone();
            let rx = rx.clone();
            threads.push(std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t as u64);
                for i in 0..20_000 {
                    let size = match rng.u8(..) {
                        0..=200 => rng.usize(1..=MAX_SMALL),
                        _ => rng.usize(1..=20_000),
                    };
                    let l = Layout::from_size_align(size, 8).unwrap();
                    let tag = t.wrapping_mul(31).wrapping_add(i as u8);
                    unsafe {
                        let mut p = heap.alloc(l);
                        assert!(!p.is_null());
                        fill(p, size, tag);
                        let mut size = size;
                        if i % 7 == 0 {
                            let new = rng.usize(1..=3000);
                            p = heap.realloc(p, l, new);
                            check(p, size.min(new), tag);
                            size = new;
                            fill(p, size, tag);
                        }
                        if i % 3 == 0 {
                            // Another thread frees it.
                            tx.send((p as usize, size, tag)).unwrap();
                        } else {
                            check(p, size, tag);
                            heap.dealloc(p, Layout::from_size_align(size, 8).unwrap());
                        }
                    }
                    let got = rx.lock().unwrap().try_recv();
                    if let Ok((p, size, tag)) = got {
                        unsafe {
                            check(p as *const u8, size, tag);
                            heap.dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap());
                        }
                    }
                }
            }));
        }
        drop(tx);
        for t in threads {
            t.join().unwrap();
        }
        while let Ok((p, size, tag)) = rx.lock().unwrap().try_recv() {
            unsafe {
                check(p as *const u8, size, tag);
                heap.dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap());
            }
        }
        let (_, bytes) = heap.cached();
        assert!(bytes <= BYTES_PER_SHARD * SHARDS + DEPOT_BYTES);
    }
}
