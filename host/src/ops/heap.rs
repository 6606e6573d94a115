//! Giving memory back after a burst. A burst of large responses (10 000 children, a
//! 4 MiB status) or of many calls at once leaves glibc's arenas holding freed pages,
//! and glibc returns them to the kernel only from the top of each heap; the host asks it
//! to return every free page now and then, so RSS falls back after the burst.

/// How often the host gives freed heap memory back.
pub const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Return the allocator's free pages to the kernel.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
