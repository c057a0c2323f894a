//! Helpers of the command-line tests (`mod cli_common;` in each).

use std::path::PathBuf;

/// A file or folder of ../shared/data.
#[allow(dead_code, reason = "not every command-line test reads the shared data")]
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data").join(rel)
}

/// The `error` lines of a command's stderr. Mesa prints "error: `XDG_RUNTIME_DIR` is
/// invalid" on machines without a session; such lines are the driver's, not ours.
pub fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("error") && !l.contains("XDG_RUNTIME_DIR")).collect()
}
