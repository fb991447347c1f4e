//! Handing the binary's cold pages back once the process goes idle.
//!
//! Every controller's start-up code (flag parsing, TLS and PKI set-up, first lists, each
//! controller's construction) runs once, and its pages then stay in the resident set for the
//! life of the process: about 5 MB of an idle edgekcm's 9 MB were the binary's own pages,
//! most of them never run again. When the process goes idle (`crate::runtime::pool`'s last
//! helper ends) this asks the kernel to reclaim the executable's read-only mappings
//! (`MADV_PAGEOUT`, Linux 5.4+): code and constants that run again fault back in from the
//! page cache or the file, the rest stay out. At most once per `EVERY`, so a load that comes
//! and goes does not fault its code in again and again. Only clean, file-backed pages are
//! touched; writable data and the heap are left alone. On an older kernel the call fails
//! and nothing changes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time between two page-outs.
const EVERY: Duration = Duration::from_secs(600);

/// One read-only mapping of the executable: its start and length.
#[derive(Debug, PartialEq, Eq)]
pub struct Region {
    pub start: usize,
    pub len: usize,
}

/// The executable's read-only, file-backed mappings (code, constants) in a
/// `/proc/self/maps` text, given the executable's path as the kernel shows it there.
pub fn readonly_regions(maps: &str, exe: &str) -> Vec<Region> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let range = f.next()?;
            let perms = f.next()?;
            let path = line.splitn(6, |c: char| c.is_ascii_whitespace()).nth(5)?;
            if path.trim_start() != exe || !perms.starts_with("r-") {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let start = usize::from_str_radix(a, 16).ok()?;
            let end = usize::from_str_radix(b, 16).ok()?;
            (end > start).then(|| Region {
                start,
                len: end - start,
            })
        })
        .collect()
}

/// Page out the executable's read-only mappings if the last page-out was at least `EVERY`
/// ago (or never). Returns the bytes advised, 0 when skipped or not possible.
pub fn page_out_if_due() -> usize {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    {
        let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < EVERY) {
            return 0;
        }
        *last = Some(Instant::now());
    }
    page_out()
}

fn page_out() -> usize {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return 0;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut advised = 0;
    for r in readonly_regions(&maps, &exe.to_string_lossy()) {
        // SAFETY: the range is a whole mapping of this process's executable, read-only and
        // file-backed; MADV_PAGEOUT only drops clean pages, which fault back in unchanged.
        let ok = unsafe {
            rustix::mm::madvise(
                r.start as *mut std::ffi::c_void,
                r.len,
                rustix::mm::Advice::LinuxPageOut,
            )
        };
        if ok.is_ok() {
            advised += r.len;
        }
    }
    log::debug!("idle: {advised} bytes of the binary's read-only pages handed back");
    advised
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0100000 r--p 00000000 fd:01 123 /usr/bin/edgekcm
55d0c0100000-55d0c0500000 r-xp 00100000 fd:01 123 /usr/bin/edgekcm
55d0c0500000-55d0c0580000 r--p 00500000 fd:01 123 /usr/bin/edgekcm
55d0c0580000-55d0c0590000 rw-p 00580000 fd:01 123 /usr/bin/edgekcm
55d0c1000000-55d0c1200000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 r-xp 00000000 fd:01 77 /usr/bin/edgekcm-other
7f0000002000-7f0000003000 r-xp 00000000 fd:01 78 /opt/a b/edgekcm
";

    #[test]
    fn only_the_executables_read_only_mappings() {
        let r = readonly_regions(MAPS, "/usr/bin/edgekcm");
        assert_eq!(
            r,
            vec![
                Region {
                    start: 0x55d0c0000000,
                    len: 0x100000
                },
                Region {
                    start: 0x55d0c0100000,
                    len: 0x400000
                },
                Region {
                    start: 0x55d0c0500000,
                    len: 0x80000
                },
            ]
        );
        // A path with a space, and a replaced binary as the kernel names it.
        assert_eq!(readonly_regions(MAPS, "/opt/a b/edgekcm").len(), 1);
        let deleted = "1000-2000 r-xp 00000000 fd:01 9 /usr/bin/edgekcm (deleted)\n";
        assert_eq!(
            readonly_regions(deleted, "/usr/bin/edgekcm (deleted)").len(),
            1
        );
        assert!(readonly_regions("garbage\n\n1-0 r-xp 0 0 0 /x\n", "/x").is_empty());
    }

    #[test]
    fn at_most_once_per_period() {
        // The first call may page out (it runs in the test binary), the next is skipped.
        page_out_if_due();
        assert_eq!(page_out_if_due(), 0);
    }
}
