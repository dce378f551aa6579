//! Below safe Rust: huge pages for the sketch's arrays (the one place the crate calls the
//! operating system) and a prefetch hint (the one processor instruction it names).
//!
//! # Huge pages
//!
//! A key's cells are random words in arrays of megabytes, so nearly every observe misses the
//! TLB as well as the caches when the arrays sit on 4 KiB pages (a 32 MiB sketch spans 8,192 of
//! them, more than a core's TLB holds), and under a hypervisor each TLB miss is a walk of two
//! page tables. On 2 MiB pages a 32 MiB sketch is 16 TLB entries. Linux gives an anonymous
//! mapping huge pages at fault time when it is marked `MADV_HUGEPAGE` (and transparent huge
//! pages are `madvise` or `always`, the usual defaults); elsewhere, or when the kernel has
//! none to give, the arrays stay on small pages and nothing else changes.

/// The huge page size this module asks for (x86_64 and aarch64 with 4 KiB base pages).
#[cfg(all(target_os = "linux", not(loom)))]
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole huge pages inside `len` bytes at `start` with huge pages
/// when they are first touched. Advice only: the memory and its contents are unchanged, and a
/// refusal (old kernel, huge pages disabled) is ignored.
#[cfg(all(target_os = "linux", not(loom)))]
#[allow(unsafe_code)] // the workspace forbids it; this one call is why the sketch crate only denies it
pub(crate) fn prefer_huge(start: *const u8, len: usize) {
    // Only whole huge pages inside the range: madvise wants a page-aligned start, and a huge
    // page must not reach outside memory this allocation owns.
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    if end <= first {
        return;
    }
    // SAFETY: `madvise(MADV_HUGEPAGE)` is advice: it reads and writes no memory, changes no
    // contents and no protection, so it cannot make any reference invalid. The range
    // `first..end` lies inside the caller's live allocation of `len` bytes at `start` and is
    // page-aligned, as the call requires; on a bad range it only fails with EINVAL.
    let refused =
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    // Ignored: without huge pages the arrays work the same, only slower.
    let _ = refused;
}

/// Elsewhere: nothing to ask.
#[cfg(not(all(target_os = "linux", not(loom))))]
pub(crate) fn prefer_huge(_start: *const u8, _len: usize) {}

/// Asks the processor to bring the cache line holding `word` into its caches, and returns at
/// once: no wait for the line, no value, no fault. On x86_64 a `prefetcht0`; elsewhere a
/// plain load whose value is discarded (it waits at retirement, so it overlaps less).
#[inline]
#[cfg(all(target_arch = "x86_64", not(loom)))]
#[allow(unsafe_code)] // see `prefer_huge`
pub(crate) fn prefetch(word: &crate::sync::AtomicU64) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: the call is unsafe only because `_mm_prefetch` is a `#[target_feature(enable =
    // "sse")]` function, and SSE is part of the x86_64 baseline: every x86_64 processor has
    // it. A prefetch reads no memory architecturally and never faults; the pointer comes
    // from a live reference anyway.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(word.as_ptr().cast_const().cast()) }
}

/// Elsewhere (and under loom, whose atomics are not plain words): a load, discarded.
#[inline]
#[cfg(not(all(target_arch = "x86_64", not(loom))))]
pub(crate) fn prefetch(word: &crate::sync::AtomicU64) {
    // Relaxed: the value is thrown away; only the cache line is wanted.
    std::hint::black_box(word.load(crate::sync::Ordering::Relaxed));
}
