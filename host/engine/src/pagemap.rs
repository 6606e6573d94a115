//! Whether Wasmtime may reset pool slots with `PAGEMAP_SCAN` on this machine.
//!
//! Wasmtime 48 resets in place only the pages the scan reports as present, written and
//! neither file- nor zero-page-backed, and treats every page it does not report as clean.
//! Two things make that leave a call's memory for the next instance of the slot, which may
//! belong to another plugin:
//! - a written page swapped out is reported as swapped, not present (upstream
//!   bytecodealliance/wasmtime#14357), so with swap on it is neither reset nor decommitted;
//! - kernels since the `PAGE_IS_WRITTEN` narrowing (mm, 2026) report "written" only inside
//!   userfaultfd write-protected ranges, so the scan finds no dirty page at all.
//!
//! So the scan is used only where a probe of the same query, on a page this process just
//! wrote, finds that page, and no swap can take the pool's pages; otherwise the slot's
//! first pages are reset blindly and the rest decommitted, which is slower and always clean.

/// Why the scan may not be used here, or `Ok` when it may.
pub(crate) fn check() -> Result<(), String> {
    if swap_possible() {
        return Err("swap is on, and a swapped-out page would escape the scan".into());
    }
    probe()
}

/// Swap is configured and this process's cgroup (v2) does not forbid it.
fn swap_possible() -> bool {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("SwapTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let forbidden = std::fs::read_to_string("/sys/fs/cgroup/memory.swap.max").is_ok_and(|v| v.trim() == "0");
    total > 0 && !forbidden
}

#[cfg(target_os = "linux")]
mod scan {
    /// `struct pm_scan_arg` of `<linux/fs.h>`.
    #[repr(C)]
    pub struct Arg {
        pub size: u64,
        pub flags: u64,
        pub start: u64,
        pub end: u64,
        pub walk_end: u64,
        pub vec: u64,
        pub vec_len: u64,
        pub max_pages: u64,
        pub category_inverted: u64,
        pub category_mask: u64,
        pub category_anyof_mask: u64,
        pub return_mask: u64,
    }

    /// `struct page_region`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct Region {
        pub start: u64,
        pub end: u64,
        pub categories: u64,
    }

    /// `_IOWR('f', 16, struct pm_scan_arg)`.
    pub const PAGEMAP_SCAN: u64 = (3 << 30) | ((size_of::<Arg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;
    pub const WRITTEN: u64 = 1 << 1;
    pub const FILE: u64 = 1 << 2;
    pub const PRESENT: u64 = 1 << 3;
    pub const PFNZERO: u64 = 1 << 5;
}

/// Wasmtime's query over two fresh pages, the first written and the second only read:
/// exactly the first must come back.
#[cfg(target_os = "linux")]
fn probe() -> Result<(), String> {
    use scan::*;
    use std::os::fd::AsRawFd;

    let pagemap =
        std::fs::File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}"))?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh private anonymous mapping, unmapped below; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    let base = base.cast::<u8>();
    // SAFETY: both pages lie inside the mapping made above.
    unsafe {
        base.write_volatile(1);
        base.add(page).read_volatile();
    }
    let mut regions = [Region::default(); 4];
    let mut arg = Arg {
        size: size_of::<Arg>() as u64,
        flags: 0,
        start: base as u64,
        end: base as u64 + 2 * page as u64,
        walk_end: 0,
        vec: regions.as_mut_ptr() as u64,
        vec_len: regions.len() as u64,
        max_pages: 0,
        category_inverted: PFNZERO | FILE,
        category_mask: WRITTEN | PRESENT | PFNZERO | FILE,
        category_anyof_mask: 0,
        return_mask: 0,
    };
    // SAFETY: `arg` and `regions` outlive the call and describe memory this process owns.
    let found = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
    let error = std::io::Error::last_os_error();
    // SAFETY: the mapping made above, unmapped once.
    unsafe { libc::munmap(base.cast(), 2 * page) };
    let written = (base as u64, base as u64 + page as u64);
    match found {
        -1 => Err(format!("PAGEMAP_SCAN: {error}")),
        1 if (regions[0].start, regions[0].end) == written => Ok(()),
        _ => Err(format!(
            "the kernel's scan reported {found} region(s) for one written page"
        )),
    }
}

#[cfg(not(target_os = "linux"))]
fn probe() -> Result<(), String> {
    Err("PAGEMAP_SCAN is Linux's".into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The ioctl's number as `<linux/fs.h>` spells it on x86_64 and aarch64.
    #[test]
    fn the_request_number_is_the_kernels() {
        assert_eq!(scan::PAGEMAP_SCAN, 0xc060_6610);
    }
}
