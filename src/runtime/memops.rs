//! Copy and compare of memory for the static x86_64 musl build, which exports them as
//! `memcpy`, `memmove`, `memcmp` and `bcmp` in place of musl's (`src/main.rs`).
//!
//! musl's x86_64 `memcpy` is `rep movsq` with byte loops around it, whose start-up costs
//! dozens of cycles on every call, and most of edgekcm's copies are short (a string, a map
//! node's keys); its `memmove` copies backwards with the direction flag set, which CPUs
//! run slowly; its `memcmp` compares a byte at a time. In the endpoints workload against a
//! real apiserver `memcpy` alone was 15 % of the static build's samples.
//!
//! Up to 64 bytes are copied with unaligned loads of the whole range into registers
//! followed by the stores (so overlap cannot matter), longer forward copies with
//! `rep movsb` (fast on every CPU with ERMS, which is every x86_64 of the last decade), and
//! longer backward ones (a `memmove` to a higher overlapping address) 16 bytes at a time
//! from the end. Loops are written in assembly: a loop of loads and stores in Rust could be
//! turned back into a call to `memcpy` by the compiler.

#![cfg(target_arch = "x86_64")]

use core::arch::asm;
use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
use core::ptr::{read_unaligned as rd, write_unaligned as wr};

/// Copy `n <= 64` bytes; every load happens before any store, so the ranges may overlap.
///
/// # Safety
/// `s` is readable and `d` writable for `n` bytes.
#[inline(always)]
unsafe fn copy_short(d: *mut u8, s: *const u8, n: usize) {
    unsafe {
        if n >= 32 {
            let (a, b) = (rd(s as *const __m128i), rd(s.add(16) as *const __m128i));
            let c = rd(s.add(n - 32) as *const __m128i);
            let e = rd(s.add(n - 16) as *const __m128i);
            wr(d as *mut __m128i, a);
            wr(d.add(16) as *mut __m128i, b);
            wr(d.add(n - 32) as *mut __m128i, c);
            wr(d.add(n - 16) as *mut __m128i, e);
        } else if n >= 16 {
            let a = _mm_loadu_si128(s as *const __m128i);
            let b = _mm_loadu_si128(s.add(n - 16) as *const __m128i);
            _mm_storeu_si128(d as *mut __m128i, a);
            _mm_storeu_si128(d.add(n - 16) as *mut __m128i, b);
        } else if n >= 8 {
            let (a, b) = (rd(s as *const u64), rd(s.add(n - 8) as *const u64));
            wr(d as *mut u64, a);
            wr(d.add(n - 8) as *mut u64, b);
        } else if n >= 4 {
            let (a, b) = (rd(s as *const u32), rd(s.add(n - 4) as *const u32));
            wr(d as *mut u32, a);
            wr(d.add(n - 4) as *mut u32, b);
        } else if n > 0 {
            let (a, b, c) = (*s, *s.add(n / 2), *s.add(n - 1));
            *d = a;
            *d.add(n / 2) = b;
            *d.add(n - 1) = c;
        }
    }
}

/// Copy `n` bytes forwards: right for disjoint ranges and for `d` below `s`.
///
/// # Safety
/// `s` is readable and `d` writable for `n` bytes.
#[inline(always)]
unsafe fn copy_forward(d: *mut u8, s: *const u8, n: usize) {
    if n <= 64 {
        unsafe { copy_short(d, s, n) };
        return;
    }
    // SAFETY: `rep movsb` copies `rcx` bytes from `rsi` to `rdi` upwards (the direction
    // flag is clear, as the ABI guarantees at every call).
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") d => _,
            inout("rsi") s => _,
            options(nostack, preserves_flags)
        );
    }
}

/// Copy `n > 64` bytes backwards, for `d` above `s` within the source range: 16 bytes at a
/// time from the end, the first 16 loaded before anything is stored.
///
/// # Safety
/// `s` is readable and `d` writable for `n` bytes; `n > 64`.
#[inline(always)]
unsafe fn copy_backward(d: *mut u8, s: *const u8, n: usize) {
    // SAFETY: offsets n-16, n-32, ... down to one in 1..=16 are copied, then the first 16
    // bytes (loaded first); each store lands above every source byte still to be read.
    unsafe {
        asm!(
            "movups {head}, [{s}]",
            "2:",
            "movups {x}, [{s} + {i}]",
            "movups [{d} + {i}], {x}",
            "sub {i}, 16",
            "ja 2b",
            "movups [{d}], {head}",
            s = in(reg) s,
            d = in(reg) d,
            i = inout(reg) n - 16 => _,
            head = out(xmm_reg) _,
            x = out(xmm_reg) _,
            options(nostack)
        );
    }
}

/// `memcpy`.
///
/// # Safety
/// As C's `memcpy`.
#[inline(always)]
pub unsafe fn copy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    unsafe { copy_forward(d, s, n) };
    d
}

/// `memmove`.
///
/// # Safety
/// As C's `memmove`.
#[inline(always)]
pub unsafe fn move_bytes(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    if n <= 64 {
        unsafe { copy_short(d, s, n) };
    } else if (d as usize).wrapping_sub(s as usize) >= n {
        // `d` below `s`, or at or past its end.
        unsafe { copy_forward(d, s, n) };
    } else {
        unsafe { copy_backward(d, s, n) };
    }
    d
}

/// `memcmp`: the sign of the first differing byte's difference (as unsigned bytes).
///
/// # Safety
/// As C's `memcmp`.
#[inline(always)]
pub unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    unsafe {
        while i + 8 <= n {
            let (x, y) = (rd(a.add(i) as *const u64), rd(b.add(i) as *const u64));
            if x != y {
                // The first differing byte decides: compare as big-endian numbers.
                return if x.swap_bytes() < y.swap_bytes() {
                    -1
                } else {
                    1
                };
            }
            i += 8;
        }
        while i < n {
            let (x, y) = (*a.add(i), *b.add(i));
            if x != y {
                return x as i32 - y as i32;
            }
            i += 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn copies_every_length_and_alignment() {
        for n in 0..300 {
            for off in 0..3 {
                let src = pattern(n + off, n as u8);
                let mut dst = vec![0xAAu8; n + 8];
                unsafe { copy(dst.as_mut_ptr().add(off), src.as_ptr().add(off), n) };
                assert_eq!(&dst[off..off + n], &src[off..off + n], "n {n} off {off}");
                assert!(dst[..off].iter().all(|&x| x == 0xAA));
                assert!(
                    dst[off + n..].iter().all(|&x| x == 0xAA),
                    "n {n}: wrote past"
                );
            }
        }
    }

    #[test]
    fn moves_overlapping_ranges_either_way() {
        for n in 0..260 {
            for shift in [1usize, 2, 7, 8, 15, 16, 17, 33, 64, 65, 100] {
                let base = pattern(n + shift, 3);
                // Up: d = s + shift.
                let mut buf = base.clone();
                let p = buf.as_mut_ptr();
                unsafe { move_bytes(p.add(shift), p, n) };
                assert_eq!(&buf[shift..shift + n], &base[..n], "up n {n} shift {shift}");
                assert_eq!(&buf[..shift.min(n + shift)], &base[..shift.min(n + shift)]);
                // Down: d = s - shift.
                let mut buf = base.clone();
                let p = buf.as_mut_ptr();
                unsafe { move_bytes(p, p.add(shift), n) };
                assert_eq!(
                    &buf[..n],
                    &base[shift..shift + n],
                    "down n {n} shift {shift}"
                );
                assert_eq!(&buf[n..], &base[n..], "down n {n}: wrote past");
            }
        }
    }

    #[test]
    fn compares_as_unsigned_bytes() {
        for n in 0..40 {
            let a = pattern(n, 5);
            assert_eq!(unsafe { compare(a.as_ptr(), a.as_ptr(), n) }, 0);
            for at in 0..n {
                for (x, y) in [(0u8, 1u8), (1, 0), (0x7f, 0x80), (0x80, 0x7f), (0, 255)] {
                    let (mut l, mut r) = (a.clone(), a.clone());
                    l[at] = x;
                    r[at] = y;
                    // A later difference must not matter.
                    if at + 1 < n {
                        l[n - 1] = 255;
                        r[n - 1] = 0;
                    }
                    let got = unsafe { compare(l.as_ptr(), r.as_ptr(), n) };
                    let want = l.cmp(&r) as i32;
                    assert_eq!(got.signum(), want, "n {n} at {at} {x} {y}");
                }
            }
        }
    }
}
