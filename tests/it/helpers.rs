//! What the end-to-end tests share.

/// The `error` lines of a command's stderr. Mesa prints "error: `XDG_RUNTIME_DIR` is
/// invalid" on machines without a session; such lines are the driver's, not ours.
pub fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("error") && !l.contains("XDG_RUNTIME_DIR")).collect()
}
