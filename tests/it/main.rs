//! The end-to-end tests: the `splatforge` binary (`cli_*`), the window (`gui` through
//! `egui_kittest`, `gui_smoke` in Xvfb) and the repository's rules. One binary, a module per
//! concern (TESTING.md); it belongs to the app package, the only one that can name the binary.

mod cli_convert;
mod cli_info;
mod cli_poses;
mod cli_render;
mod cli_train;
mod gpu_script;
mod gui;
mod gui_smoke;
mod helpers;
mod repo_rules;
