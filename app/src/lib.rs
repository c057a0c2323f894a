//! The desktop app, as a library so that tests can drive it (`egui_kittest`). The command line
//! lives in `main.rs`.

pub mod gui;

/// Bytes for people: KiB below a MiB, MiB below a GiB, GiB above.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else if mib >= 1.0 {
        format!("{mib:.1} MiB")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}
