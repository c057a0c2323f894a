//! The desktop app: eframe + egui on the same wgpu device as the trainer task.
//!
//! Threads (all named): the UI thread (eframe) only reads channels and shared slots and
//! queues commands; `splat-trainer` owns every run ([`splat_trainer::task`]); `splat-viewer`
//! renders the viewport into a texture ([`viewer`]); `splat-files` opens files and
//! `file-dialog` runs native dialogs ([`files`]); `colmap-poses` computes camera poses for
//! dropped photos or a video ([`poses`]); `video` makes a turntable video ([`video_job`]).
//! The UI thread never waits on the GPU.

mod app;
mod crop;
mod crop_handles;
mod event;
mod file_events;
mod files;
mod history;
mod keyframes;
mod log_pane;
mod memory_pane;
mod menu;
mod poses;
pub mod sample;
mod screen;
mod self_test;
mod session;
mod settings_pane;
mod task_events;
mod training_pane;
mod video_job;
mod video_pane;
mod viewer;
mod viewport;

use std::path::PathBuf;
use std::sync::Arc;

pub use app::{SplatApp, UiState};
pub use crop::{Select, Tool};

/// What the command line gives the window.
#[derive(Clone, Debug, Default)]
pub struct GuiArgs {
    /// A dataset or splat file to open instead of the sample scene.
    pub path: Option<PathBuf>,
    /// Where Ctrl+E / Ctrl+S write (default: `<dataset>_exports/` beside the dataset).
    pub out: Option<PathBuf>,
    /// Start training as soon as the dataset is loaded.
    pub start: bool,
    /// Steps of the runs started from the window (default: [`app::DEFAULT_STEPS`]).
    pub steps: Option<u32>,
    /// GPU memory budget of the runs, in bytes (default: from the adapter).
    pub memory_budget: Option<u64>,
}

/// How the app asks for its device: our limits and features (the trainer's kernels need
/// more storage buffers per stage than egui's default device offers, see
/// [`splat_trainer::render::device_descriptor`]).
#[must_use]
pub fn wgpu_setup() -> eframe::egui_wgpu::WgpuSetup {
    let mut setup = eframe::egui_wgpu::WgpuSetupCreateNew::without_display_handle();
    setup.device_descriptor = Arc::new(splat_trainer::render::device_descriptor);
    setup.instance_descriptor.memory_budget_thresholds =
        splat_trainer::render::MEMORY_BUDGET_THRESHOLDS;
    eframe::egui_wgpu::WgpuSetup::CreateNew(setup)
}

/// Opens the window and runs until it is closed.
pub fn run(args: GuiArgs) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("Splatforge")
            .with_app_id("splatforge")
            .with_inner_size([1400.0, 900.0])
            .with_min_inner_size([720.0, 480.0])
            .with_drag_and_drop(true),
        renderer: eframe::Renderer::Wgpu,
        wgpu_options: eframe::egui_wgpu::WgpuConfiguration {
            wgpu_setup: wgpu_setup(),
            ..Default::default()
        },
        ..Default::default()
    };
    eframe::run_native(
        "Splatforge",
        options,
        Box::new(move |cc| Ok(Box::new(SplatApp::new(cc, args)?) as Box<dyn eframe::App>)),
    )
    .map_err(|e| anyhow::anyhow!("the window failed: {e}"))
}
