//! Logging through the host: lines go to the host's `tracing` output with the plugin
//! name and the key of the object being reconciled. Natively (in `cargo test`) they go
//! to stderr.

/// Log severity.
pub use crate::bindings::capstan::reconciler::types::Level;

/// Emit a log line at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_family = "wasm")]
    crate::bindings::capstan::reconciler::host::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    eprintln!("[{level:?}] {message}");
}

/// Log at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Log at info level.
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Log at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Log at error level.
pub fn error(message: &str) {
    log(Level::Error, message)
}
