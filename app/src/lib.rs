//! The desktop app, as a library so that tests can drive it (`egui_kittest`). The command line
//! lives in `main.rs`.

pub mod gui;
